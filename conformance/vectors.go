package conformance

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

// Vectors holds the project's own vector files (vectors/*.json), so that
// the sluice command and store suites can run them without a checkout.
//
//go:embed vectors/*.json
var Vectors embed.FS

// WriteVectors writes the files of Vectors into dir, for Run, which reads
// paths.
func WriteVectors(dir string) error {
	return fs.WalkDir(Vectors, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := Vectors.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o600)
	})
}
