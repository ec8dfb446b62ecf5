package site

import (
	"testing"

	"airgapcoder/codersdk"
)

func TestRegionChoiceOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   codersdk.Region
		want regionChoice
		ok   bool
	}{
		{name: "primary", in: codersdk.Region{Name: "primary", DisplayName: "Default", PathAppURL: "https://coder.example:3443/", WildcardHostname: "*.apps.example:3443"},
			want: regionChoice{Name: "primary", DisplayName: "Default", PathAppURL: "https://coder.example:3443", AppBase: "https://*.apps.example:3443"}, ok: true},
		{name: "proxy, wildcard takes the access URL's port", in: codersdk.Region{Name: "eu", PathAppURL: "https://eu.example:8443", WildcardHostname: "*.eu.example"},
			want: regionChoice{Name: "eu", DisplayName: "eu", PathAppURL: "https://eu.example:8443", AppBase: "https://*.eu.example:8443"}, ok: true},
		{name: "proxy, wildcard with its own port", in: codersdk.Region{Name: "eu", DisplayName: "Europe", PathAppURL: "https://eu.example", WildcardHostname: "*.eu.example:9443"},
			want: regionChoice{Name: "eu", DisplayName: "Europe", PathAppURL: "https://eu.example", AppBase: "https://*.eu.example:9443"}, ok: true},
		{name: "proxy without wildcard", in: codersdk.Region{Name: "us", PathAppURL: "http://us.example/"},
			want: regionChoice{Name: "us", DisplayName: "us", PathAppURL: "http://us.example"}, ok: true},
		{name: "not registered yet", in: codersdk.Region{Name: "ap"}},
		{name: "not http", in: codersdk.Region{Name: "ap", PathAppURL: "ftp://ap.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := regionChoiceOf(tc.in)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %+v, %v, want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
