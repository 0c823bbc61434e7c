package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/internal/app/conffile"
)

const plansDoc = `Plans reads and writes the plans of a running sluice serve (server.plans), which keeps
them in its store for every process on it (docs/plans.md):

  get LIMITER KEY            the plan of KEY (with --prefix, of the prefix KEY)
  set LIMITER KEY POLICY     write the plan, POLICY a JSON description as config files
                             describe a limiter: '{"policy": "fixed_window", "limit": 3, "interval": "1s"}'
  delete LIMITER KEY         delete the plan
  list LIMITER               the limiter's plans, a page at a time (--after, --limit)
  import FILE                write every plan of FILE, YAML: a limiter's plans as its overrides:
                             plans: {api: [{key: tenant-7, policy: fixed_window, limit: 3, interval: 1s}]}

Writes need an admin token (server.auth.admin_tokens), read from --token-file or from
SLUICE_TOKEN; reads take any token of the server.`

// importBatch is how many plans one request of plans import carries.
const importBatch = 1000

func runPlans(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plans", "[--server URL] [--token-file FILE] [--prefix] [--if-match V] [--after C] [--limit N] [--timeout D] get|set|delete|list|import ARGS", plansDoc, stderr)
	server := fs.String("server", "http://127.0.0.1:8080", "the `URL` of sluice serve's HTTP API")
	tokenFile := fs.String("token-file", "", "a `file` holding the bearer token (default: $SLUICE_TOKEN)")
	prefix := fs.Bool("prefix", false, "KEY is a prefix: the plan of every key that starts with it")
	ifMatch := fs.String("if-match", "", "write only if the plan is at this `version` (0: only if there is none)")
	after := fs.String("after", "", "list after this `cursor`, the next of the page before")
	limit := fs.Int("limit", 100, "list at most `n` plans")
	timeout := fs.duration("timeout", 5*time.Minute, "bound on the whole command (a `duration`)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fs.usagef("want a subcommand: get, set, delete, list or import")
	}
	token := os.Getenv("SLUICE_TOKEN")
	if *tokenFile != "" {
		b, err := conffile.Read(*tokenFile)
		if err != nil {
			return err
		}
		token = strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := planClient{base: strings.TrimSuffix(*server, "/"), token: token}
	sub, rest := fs.Arg(0), fs.Args()[1:]
	want := map[string]int{"get": 2, "set": 3, "delete": 2, "list": 1, "import": 1}
	n, ok := want[sub]
	switch {
	case !ok:
		return fs.usagef("unknown subcommand %q: want get, set, delete, list or import", sub)
	case len(rest) != n:
		return fs.usagef("%s takes %d arguments, got %d", sub, n, len(rest))
	}
	planPath := func(limiter, key string) string {
		p := "/api/v1/plans/" + url.PathEscape(limiter) + "/" + url.PathEscape(key)
		if *prefix {
			p += "?prefix=true"
		}
		return p
	}
	var header []string
	if *ifMatch != "" {
		header = []string{"If-Match", `"` + *ifMatch + `"`}
	}
	switch sub {
	case "get":
		return c.print(ctx, stdout, "GET", planPath(rest[0], rest[1]), nil)
	case "set":
		return c.print(ctx, stdout, "PUT", planPath(rest[0], rest[1]), []byte(rest[2]), header...)
	case "delete":
		return c.print(ctx, stdout, "DELETE", planPath(rest[0], rest[1]), nil, header...)
	case "list":
		q := url.Values{"limit": {fmt.Sprint(*limit)}}
		if *after != "" {
			q.Set("after", *after)
		}
		return c.print(ctx, stdout, "GET", "/api/v1/plans/"+url.PathEscape(rest[0])+"?"+q.Encode(), nil)
	}
	items, err := readPlansFile(rest[0])
	if err != nil {
		return err
	}
	var total, changed int
	for len(items) > 0 {
		batch := items[:min(importBatch, len(items))]
		items = items[len(batch):]
		body, err := json.Marshal(map[string]any{"plans": batch})
		if err != nil {
			return err
		}
		var out struct{ Plans, Changed int }
		if err := c.do(ctx, "POST", "/api/v1/plans", body, &out); err != nil {
			return fmt.Errorf("after %d plans written: %w", total, err)
		}
		total, changed = total+out.Plans, changed+out.Changed
	}
	fmt.Fprintf(stdout, "%d plans imported, %d changed\n", total, changed)
	return nil
}

// planClient calls sluice serve's plan API.
type planClient struct {
	base, token string
}

// do sends a request and decodes a 200 answer into out (nil: drops it),
// or returns the API's error.
func (c planClient) do(ctx context.Context, method, path string, body []byte, out any, header ...string) error {
	r, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// print sends a request and prints its answer, indented.
func (c planClient) print(ctx context.Context, w io.Writer, method, path string, body []byte, header ...string) error {
	var out json.RawMessage
	if err := c.do(ctx, method, path, body, &out, header...); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// planItem is a plan of an import, as POST /api/v1/plans takes it.
type planItem struct {
	Limiter string         `json:"limiter"`
	Key     string         `json:"key"`
	Prefix  bool           `json:"prefix,omitempty"`
	Policy  map[string]any `json:"policy"`
}

// readPlansFile reads an import file: plans: a mapping of limiters to
// lists of plans, each a policy with a key or a prefix, as a limiter's
// overrides: are written. The server checks each policy.
func readPlansFile(path string) ([]planItem, error) {
	data, err := conffile.Read(path)
	if err != nil {
		return nil, err
	}
	var f struct {
		Plans map[string][]map[string]any `yaml:"plans"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []planItem
	for limiter, ps := range f.Plans {
		for i, p := range ps {
			it := planItem{Limiter: limiter, Policy: p}
			key, hasKey := p["key"].(string)
			pre, hasPrefix := p["prefix"].(string)
			switch {
			case hasKey == hasPrefix:
				return nil, fmt.Errorf("%s: plans.%s[%d]: a plan has a key or a prefix (a string), one of them", path, limiter, i)
			case hasKey:
				it.Key = key
			default:
				it.Key, it.Prefix = pre, true
			}
			delete(p, "key")
			delete(p, "prefix")
			out = append(out, it)
		}
	}
	return out, nil
}
