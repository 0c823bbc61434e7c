// Package filestore is an example store: rate-limit state kept in a
// directory of files and locked across processes with flock(2). It shows
// that a store is a few methods on one of package driver's building
// blocks. Here the block is [driver.Locker]: filestore only says how to
// lock a key, read it and write it (Begin and the methods of
// [driver.LockedTx]), and [driver.NewLockStore] turns that into a
// [driver.Store] that passes the conformance suite of package drivertest.
//
// # Layout
//
// Each key has two files in the directory, named after the lower-case
// hex of the SHA-256 of the key (64 characters whatever the key, with no
// path separators, no case to be folded and within every file system's
// name limit; the key cannot be recovered from the name, which nothing
// needs):
//
//   - NAME.lock, empty, which an update holds with flock(LOCK_EX);
//   - NAME.state, an 8-byte big-endian expiry in Unix nanoseconds (0: no
//     expiry) followed by the state bytes.
//
// The lock is on a file of its own because an update writes a temporary
// file and renames it over NAME.state, which is atomic: a reader sees the
// old state or the new one, never part of either. A lock on NAME.state
// would stay on the replaced file.
//
// # Limits
//
//   - Unix only, where package syscall has Flock (not AIX, Solaris or
//     illumos).
//   - One machine, or a shared file system on which flock works between
//     all the processes that use the directory. Expiries are on each
//     process's clock.
//   - flock cannot be interrupted, so an update waiting for a lock polls
//     with LOCK_NB, sleeping up to a few milliseconds between tries, until
//     its context ends; waiters are not served in order.
//   - Files are not fsynced: a crash of the machine may lose recent
//     updates (never half of one), and may leave NAME.tmp* files behind.
//   - Nothing runs in the background. An expired state is removed when an
//     update reads it, Delete removes a state at once, and
//     [Store.DeleteExpired] walks the directory. Lock files are never
//     removed: a process may hold one open, and a new one in its place
//     would let two processes hold "the" lock at once.
package filestore
