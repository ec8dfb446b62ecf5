package site

import "testing"

func TestLocalRedirect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, to, want string
	}{
		{"workspaces", "/workspaces", "/workspaces"},
		{"workspace with a query", "/@admin/dev?x=1", "/@admin/dev?x=1"},
		{"root", "/", "/"},
		{"encoded characters in a path", "/@admin/dev%2Dbox/terminal", "/@admin/dev%2Dbox/terminal"},
		{"an encoded space in a query", "/admin/users?notice=User%20alice+suspended", "/admin/users?notice=User%20alice+suspended"},
		{"fragment", "/templates/t#versions", "/templates/t#versions"},
		{"a colon in a path", "/javascript:alert(1)", "/javascript:alert(1)"},

		{"empty", "", "/"},
		{"relative", "workspaces", "/"},
		{"scheme and host", "https://evil.example/", "/"},
		{"scheme only", "https:evil.example", "/"},
		{"javascript", "javascript:alert(1)", "/"},
		{"protocol-relative", "//evil.example", "/"},
		{"backslash after the slash", `/\evil.example`, "/"},
		{"backslash later", `/workspaces\..\evil`, "/"},
		{"tab", "/\t/evil.example", "/"},
		{"newline", "/\n/evil.example", "/"},
		{"carriage return", "/\r/evil.example", "/"},
		{"space", "/ /evil.example", "/"},
		{"NUL", "/\x00/evil.example", "/"},
		{"DEL", "/\x7f/evil.example", "/"},
		{"no-break space", "/\u00a0/evil.example", "/"},
		{"ideographic space", "/\u3000/evil.example", "/"},
		{"zero-width space", "/\u200b/evil.example", "/"},
		{"encoded, as the login form's query gives it undecoded", "%2F%09%2Fevil.example", "/"},
		{"encoded tab in a path", "/%09/evil.example", "/"},
		{"encoded newline in a path", "/%0A/evil.example", "/"},
		{"encoded slashes at the start", "/%2F%2Fevil.example", "/"},
		{"encoded slash after the slash", "/%2Fevil.example", "/"},
		{"encoded backslash", "/%5Cevil.example", "/"},
		{"encoded space in a path", "/%20/evil.example", "/"},
		{"encoded Unicode space in a path", "/%E3%80%80/evil.example", "/"},
		{"encoded invalid UTF-8", "/%FF", "/"},
		{"bad escape", "/%zz", "/"},
		{"encoded control in a query", "/workspaces?x=%0D%0ALocation:%20//evil", "/"},
		{"encoded backslash in a query", "/workspaces?x=%5C", "/"},
		{"an owner's page, not user info", "/@evil.example", "/@evil.example"},
	} {
		if got := LocalRedirect(tc.to); got != tc.want {
			t.Errorf("%s: LocalRedirect(%q) got %q, want %q", tc.name, tc.to, got, tc.want)
		}
	}
}
