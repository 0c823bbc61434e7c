package config

import (
	"strconv"
	"strings"
)

// Error reports what is wrong with a limiter file and where. Load and
// LoadFile return every error as an *Error; use errors.As to get at it.
//
// When a policy constructor of package sluice rejected a value, Err is its
// *sluice.ConfigError, so that errors.Is(err, sluice.ErrInvalidConfig)
// holds; when the file could not be read, Err is the error of the read.
type Error struct {
	// File is the file's path when the error came from LoadFile, else "".
	File string
	// Path is where in the document the error is, as keys and list
	// indexes: "limiters.business.limits[1].refill.per". It is "" for the
	// document as a whole.
	Path string
	// Line and Column locate the offending node, counting from 1; both are
	// 0 when there is no node to point at (an empty file).
	Line, Column int
	// Value is the offending value or key as written, or "".
	Value string
	// Msg says what is wrong, in the words of the format.
	Msg string
	// Err is the underlying cause, or nil.
	Err error
}

// Error returns the error as
//
//	config: limits.yaml: limiters.anonymous_api.limit (line 3): must be positive, got 0
//
// leaving out the file, path or line when they are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	switch {
	case e.Path != "" && e.Line > 0:
		b.WriteString(e.Path)
		b.WriteString(" (line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString("): ")
	case e.Path != "":
		b.WriteString(e.Path)
		b.WriteString(": ")
	case e.Line > 0:
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying cause, or nil.
func (e *Error) Unwrap() error { return e.Err }
