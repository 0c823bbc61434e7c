package testserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dynaliteInstall says how to install dynalite, for a *MissingError.
const dynaliteInstall = "run scripts/test.sh, which installs the npm package dynalite into .bin/dynalite"

// dynaliteBin is where scripts/test.sh installs dynalite's command,
// relative to the root of the checkout.
var dynaliteBin = filepath.Join(".bin", "dynalite", "node_modules", ".bin", "dynalite")

// lookDynalite finds the dynalite command in PATH or, walking up from the
// working directory (a package's directory under go test), in a
// checkout's .bin/dynalite, and returns the script node runs.
func lookDynalite() (string, error) {
	if p, ok := findInDirs(pathDirs(), "dynalite"); ok {
		return filepath.EvalSymlinks(p[0])
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testserver: %w", err)
	}
	for {
		if p := filepath.Join(dir, dynaliteBin); isExecutable(p) {
			return filepath.EvalSymlinks(p)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", &MissingError{What: "dynalite", Where: "PATH or " + dynaliteBin + " above the working directory", Install: dynaliteInstall}
		}
		dir = parent
	}
}

// StartDynamo starts dynalite, a DynamoDB-compatible server (the npm
// package of that name, on Node), on a free 127.0.0.1 port with its data
// in memory and its log in a directory under os.TempDir, and waits until
// it answers. Tables are ACTIVE as soon as they are created. It returns
// the server's endpoint, "http://127.0.0.1:PORT", and stop, which kills
// the server, waits for it and removes its directory. The server checks
// that requests are signed, not by whom: any access key will do. Start-up
// is bounded by ctx and by one minute. If node or dynalite is not
// installed, the error is a *MissingError.
func StartDynamo(ctx context.Context) (endpoint string, stop func() error, err error) {
	return startIn(ctx, "dynamo", func(ctx context.Context, dir string, own func(*process)) (string, error) {
		node, err := lookPath("node", "nodejs")
		if err != nil {
			return "", err
		}
		script, err := lookDynalite()
		if err != nil {
			return "", err
		}
		srv := server{name: "dynalite", ready: "Dynalite listening at", stopSig: syscall.SIGTERM, deathSig: syscall.SIGKILL}
		p, port, err := startOnFreePort(ctx,
			func(port int) (*process, error) {
				return srv.launch(exec.Command(node, script,
					"--host", "127.0.0.1", "--port", strconv.Itoa(port),
					"--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"), dir, port)
			},
			pingDynamo)
		if err != nil {
			return "", err
		}
		own(p)
		return fmt.Sprintf("http://127.0.0.1:%d", port), nil
	})
}

// pingDynamo asks dynalite at addr for its health check: a GET that it
// answers with "healthy: …".
func pingDynamo(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(b), "healthy") {
		return fmt.Errorf("GET / answered %s %q, want healthy", resp.Status, b)
	}
	return nil
}
