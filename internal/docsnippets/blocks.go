package docsnippets

import (
	"os"
	"strings"
	"testing"
)

// Blocks returns the bodies of the fenced blocks of the Markdown file path
// whose opening fence is exactly "```"+info, and fails tb unless there are
// want of them.
func Blocks(tb testing.TB, path, info string, want int) []string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(data), "```"+info+"\n")[1:] {
		block, _, ok := strings.Cut(part, "```")
		if !ok {
			tb.Fatalf("unterminated %s block in %s", info, path)
		}
		blocks = append(blocks, block)
	}
	if len(blocks) != want {
		tb.Fatalf("%s has %d %s blocks, want %d", path, len(blocks), info, want)
	}
	return blocks
}
