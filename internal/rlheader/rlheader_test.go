package rlheader

import "testing"

func TestMembers(t *testing.T) {
	q, ok := Quote(`a "b" \c`)
	if !ok || q != `"a \"b\" \\c"` {
		t.Fatalf("Quote = %s, %v", q, ok)
	}
	if _, ok := Quote("é"); ok {
		t.Error("Quote(é) is a structured-field string, want not: not ASCII")
	}
	if _, ok := Quote("a\n"); ok {
		t.Error("Quote(a\\n) is a structured-field string, want not: a control character")
	}
	for _, tt := range []struct{ got, want string }{
		{string(AppendPolicy(nil, `"api"`, 100, 60)), `"api";q=100;w=60`},
		{string(AppendPolicy(nil, `"api"`, 100, 0)), `"api";q=100`},
		{string(AppendRateLimit([]byte(`"x";r=1;t=2, `), `"api"`, 0, 3)), `"x";r=1;t=2, "api";r=0;t=3`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
}
