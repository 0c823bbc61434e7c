package envoyrls

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

// Settings are envoyproxy/ratelimit's settings that shape what the service
// loads and answers. Each has a key of the ratelimit: section of the
// server's config file and the environment variable envoyproxy/ratelimit
// reads; a key of the file wins over the variable, and the variable over
// envoyproxy/ratelimit's default (docs/deploy.md lists them).
type Settings struct {
	// Files reports whether config files are read from the runtime
	// directories: the ratelimit: section or a RUNTIME_* variable is
	// there, and the layout names a directory (RuntimeSubdirectory when
	// RuntimeWatchRoot, else RuntimeAppDirectory), as envoyproxy/ratelimit
	// reads none without.
	Files bool
	// The files are RuntimeRoot/RuntimeSubdirectory/RuntimeAppDirectory/**,
	// dot files included unless RuntimeIgnoreDotFiles. With
	// RuntimeWatchRoot, files directly under RuntimeSubdirectory whose
	// name starts with RuntimeAppDirectory and a dot count too, as
	// envoyproxy/ratelimit's loader has it.
	RuntimeRoot, RuntimeSubdirectory, RuntimeAppDirectory string
	RuntimeIgnoreDotFiles, RuntimeWatchRoot               bool
	// MergeDomainConfig lets several files (and the envoy: section)
	// describe one domain; without it a domain twice is an error.
	MergeDomainConfig bool
	// ResponseHeaders adds LimitHeader, RemainingHeader and ResetHeader
	// to the responses.
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// Draft11Headers adds the RateLimit-Policy and RateLimit fields of
	// draft-ietf-httpapi-ratelimit-headers-11, a member per descriptor
	// with a limit, to the responses.
	Draft11Headers bool
	// StopCacheKeyIncrementWhenOverlimit leaves the other windows of a
	// request uncounted when one of them goes over its limit.
	StopCacheKeyIncrementWhenOverlimit bool
	// ShadowMode answers OK whatever the limits say; QuotaMode makes
	// every limit a quota: the request is over the limit only when all of
	// them are.
	ShadowMode, QuotaMode bool
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit in the stats.
	NearLimitRatio float32
	// LocalCacheSizeInBytes, when positive, remembers in memory the
	// windows that went over their limit, which are then not counted in
	// the store again until they end.
	LocalCacheSizeInBytes int
	// CacheKeyPrefix starts the key of every window in the store.
	CacheKeyPrefix string
	// ResponseDynamicMetadata adds the request and the descriptors'
	// metadata to the response's dynamic metadata.
	ResponseDynamicMetadata bool
	// AllowRequestLimits honours a descriptor's limit override, the
	// limit that envoyproxy/ratelimit lets the caller put in the
	// request. It is off by default: the config chooses every limit,
	// and a request's override is ignored (its descriptor is matched as
	// if it had none), since any client of the service could otherwise
	// lift its own limit.
	AllowRequestLimits bool
}

// DefaultSettings are envoyproxy/ratelimit's defaults.
func DefaultSettings() Settings {
	return Settings{
		RuntimeRoot:         "/srv/runtime_data/current",
		RuntimeAppDirectory: "config",
		RuntimeWatchRoot:    true,
		LimitHeader:         "RateLimit-Limit",
		RemainingHeader:     "RateLimit-Remaining",
		ResetHeader:         "RateLimit-Reset",
		NearLimitRatio:      0.8,
	}
}

// setting is one key of the ratelimit: section and its variable.
type setting struct {
	key, env string
	set      func(s *Settings, text string) error
}

func boolSetting(f func(*Settings) *bool) func(*Settings, string) error {
	return func(s *Settings, text string) error {
		v, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", text)
		}
		*f(s) = v
		return nil
	}
}

func textSetting(f func(*Settings) *string) func(*Settings, string) error {
	return func(s *Settings, text string) error { *f(s) = text; return nil }
}

var settings = []setting{
	{"runtime_root", "RUNTIME_ROOT", textSetting(func(s *Settings) *string { return &s.RuntimeRoot })},
	{"runtime_subdirectory", "RUNTIME_SUBDIRECTORY", textSetting(func(s *Settings) *string { return &s.RuntimeSubdirectory })},
	{"runtime_appdirectory", "RUNTIME_APPDIRECTORY", textSetting(func(s *Settings) *string { return &s.RuntimeAppDirectory })},
	{"runtime_ignoredotfiles", "RUNTIME_IGNOREDOTFILES", boolSetting(func(s *Settings) *bool { return &s.RuntimeIgnoreDotFiles })},
	{"runtime_watch_root", "RUNTIME_WATCH_ROOT", boolSetting(func(s *Settings) *bool { return &s.RuntimeWatchRoot })},
	{"merge_domain_config", "MERGE_DOMAIN_CONFIG", boolSetting(func(s *Settings) *bool { return &s.MergeDomainConfig })},
	{"limit_response_headers_enabled", "LIMIT_RESPONSE_HEADERS_ENABLED", boolSetting(func(s *Settings) *bool { return &s.ResponseHeaders })},
	{"limit_limit_header", "LIMIT_LIMIT_HEADER", textSetting(func(s *Settings) *string { return &s.LimitHeader })},
	{"limit_remaining_header", "LIMIT_REMAINING_HEADER", textSetting(func(s *Settings) *string { return &s.RemainingHeader })},
	{"limit_reset_header", "LIMIT_RESET_HEADER", textSetting(func(s *Settings) *string { return &s.ResetHeader })},
	{"draft11_response_headers", "SLUICE_DRAFT11_RESPONSE_HEADERS", boolSetting(func(s *Settings) *bool { return &s.Draft11Headers })},
	{"stop_cache_key_increment_when_overlimit", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
		boolSetting(func(s *Settings) *bool { return &s.StopCacheKeyIncrementWhenOverlimit })},
	{"shadow_mode", "SHADOW_MODE", boolSetting(func(s *Settings) *bool { return &s.ShadowMode })},
	{"quota_mode", "QUOTA_MODE", boolSetting(func(s *Settings) *bool { return &s.QuotaMode })},
	{"near_limit_ratio", "NEAR_LIMIT_RATIO", func(s *Settings, text string) error {
		v, err := strconv.ParseFloat(text, 32)
		if err != nil || math.IsNaN(v) || v < 0 || v > 1 {
			return fmt.Errorf("must be a number from 0 to 1, got %q", text)
		}
		s.NearLimitRatio = float32(v)
		return nil
	}},
	{"local_cache_size_in_bytes", "LOCAL_CACHE_SIZE_IN_BYTES", func(s *Settings, text string) error {
		v, err := strconv.ParseInt(text, 10, 0)
		if err != nil || v < 0 {
			return fmt.Errorf("must be a whole number of bytes, 0 or more, got %q", text)
		}
		s.LocalCacheSizeInBytes = int(v)
		return nil
	}},
	{"cache_key_prefix", "CACHE_KEY_PREFIX", textSetting(func(s *Settings) *string { return &s.CacheKeyPrefix })},
	{"response_dynamic_metadata", "RESPONSE_DYNAMIC_METADATA", boolSetting(func(s *Settings) *bool { return &s.ResponseDynamicMetadata })},
	{"allow_request_limits", "SLUICE_ALLOW_REQUEST_LIMITS", boolSetting(func(s *Settings) *bool { return &s.AllowRequestLimits })},
}

// runtimeVars are the variables whose presence says that
// envoyproxy/ratelimit's config files are wanted, without a ratelimit:
// section.
var runtimeVars = []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY", "RUNTIME_WATCH_ROOT"}

// SettingsFromEnv returns the settings of a config file without a
// ratelimit: section: envoyproxy/ratelimit's variables, read with
// lookupEnv (os.LookupEnv), over its defaults. Config files are read when
// a RUNTIME_* variable asks for them. A variable with a value of the wrong
// form is an error that names it.
func SettingsFromEnv(lookupEnv func(string) (string, bool)) (Settings, error) {
	return resolve(nil, lookupEnv)
}

// DecodeSettings decodes the ratelimit: section of a server config file,
// whose document path is path, over the variables of lookupEnv and the
// defaults; see SettingsFromEnv. Every key is optional, and config files
// are read when the section names a directory. Its errors are
// *yamlnode.Error values.
func DecodeSettings(path string, n *yaml.Node, lookupEnv func(string) (string, bool)) (Settings, error) {
	var d yamlnode.Decoder
	n, err := d.Deref(path, n)
	if err != nil {
		return Settings{}, err
	}
	given := map[string]string{}
	if !isNull(n) {
		keys := make([]string, len(settings))
		for i, s := range settings {
			keys[i] = s.key
		}
		m, err := d.Strict(path, n, keys, nil)
		if err != nil {
			return Settings{}, err
		}
		for i, k := range m.Keys {
			p := yamlnode.Join(path, k.Value)
			v, err := d.Scalar(p, m.Vals[i], "a value")
			if err != nil {
				return Settings{}, err
			}
			given[k.Value] = v.Value
			s := DefaultSettings()
			if err := settingOf(k.Value).set(&s, v.Value); err != nil {
				return Settings{}, errorAt(p, v, "%v", err)
			}
		}
	}
	return resolve(given, lookupEnv)
}

func settingOf(key string) setting {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.key == key })
	return settings[i]
}

// resolve applies the keys of the section (nil: there is none), then the
// variables for the keys it does not have, over the defaults.
func resolve(given map[string]string, lookupEnv func(string) (string, bool)) (Settings, error) {
	s := DefaultSettings()
	files := given != nil
	for _, st := range settings {
		text, ok := given[st.key]
		if !ok {
			if text, ok = lookupEnv(st.env); !ok {
				continue
			}
			if slices.Contains(runtimeVars, st.env) {
				files = true
			}
			if err := st.set(&s, strings.TrimSpace(text)); err != nil {
				return Settings{}, fmt.Errorf("envoyrls: environment variable %s: %w", st.env, err)
			}
			continue
		}
		if err := st.set(&s, text); err != nil {
			return Settings{}, err
		}
	}
	if files {
		if t, ok := lookupEnv("CONFIG_TYPE"); ok && !strings.EqualFold(t, "FILE") && t != "" {
			return Settings{}, fmt.Errorf("envoyrls: environment variable CONFIG_TYPE=%s: sluice reads envoyproxy/ratelimit's config from files only (CONFIG_TYPE=FILE)", t)
		}
		if s.RuntimeWatchRoot {
			s.Files = s.RuntimeSubdirectory != ""
		} else {
			s.Files = s.RuntimeAppDirectory != ""
		}
	}
	return s, nil
}
