package record

// ConfigVersion puts configurations in the order a rolling deploy goes: a record
// written by a configuration of a higher Version is never migrated back
// by one of a lower Version, so that while old and new processes share a
// store a key migrates once, to the new configuration, instead of bouncing
// between the two (and, with proportional inheritance, gaining or losing
// tokens at each bounce).
//
// When a codec meets a record written by another configuration (another
// fingerprint):
//
//   - the stored version is lower: the codec migrates the record to its
//     own configuration, by its inheritance, and stamps it with its
//     version. This is the only migration of a key per deploy.
//   - the stored version is higher: the stored configuration wins. A token
//     bucket decides under the configuration its record carries; another
//     policy decides on the stored state with its own machine (the record
//     does not carry the other configuration) and keeps the record's
//     header. Nothing is migrated.
//   - both versions are 0: the configuration of the call wins, as before
//     versions existed (unversioned configurations: one process, or
//     deploys that stop every process first).
//   - the stored record is of another kind (a token bucket's against
//     another policy's) and its version wins as above: the codec cannot
//     read it and must not overwrite it, so it decides as if the key had
//     no state and writes nothing. The processes of the older
//     configuration then do not limit that key until they are replaced;
//     the newer configuration's state stays exact.
//   - both versions are equal and above 0: two configurations claim the
//     same version, an operator's mistake. The stored one wins, as for a
//     higher version, so that the key still migrates at most once, and
//     Conflict is called: whichever process wrote first keeps its
//     configuration for the key until a higher version comes.
type ConfigVersion struct {
	// Version is the configuration's version; 0 is unversioned.
	Version uint64
	// Conflict, when not nil, is called with the stored fingerprint each
	// time a record of the same Version but another configuration is
	// met. It may be called from a store's update function, more than
	// once for one call, and must return quickly.
	Conflict func(stored uint64)
	// PerKey is set for the codecs of a policy per key: a record of the
	// same Version but another configuration is then the key's previous
	// policy, and is migrated to the codec's rather than kept.
	PerKey bool
}

// foreign reports whether rec is a record of another kind than kind
// whose configuration wins against o's (keeps): the codec of kind cannot
// read it and must not write over it.
func (o ConfigVersion) foreign(rec []byte, kind byte) bool {
	if len(rec) < headerLen || rec[1] == kind {
		return false
	}
	h, _, err := readHeader(rec, rec[1])
	return err == nil && h.origin != 0 && o.keeps(h)
}

// keeps reports whether a record of header h, written by another
// configuration than the codec's, keeps its configuration against the
// codec's of order o.
func (o ConfigVersion) keeps(h header) bool {
	switch {
	case h.version > o.Version:
		return true
	case h.version < o.Version || o.Version == 0 || o.PerKey:
		return false
	}
	if o.Conflict != nil {
		o.Conflict(h.origin)
	}
	return true
}
