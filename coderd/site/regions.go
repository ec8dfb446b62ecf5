package site

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"airgapcoder/codersdk"
)

// The region selector of the workspace page (docs/wsproxy.md). It lists
// the healthy regions the API answers (GET /api/v2/regions: the primary
// and every workspace proxy, with its health); static/regions.js measures the
// browser's latency to each region's /healthz, shows it beside the
// region's name, and keeps the visitor's choice in localStorage; live.js
// then links apps and ports through the chosen region: its access URL for
// path-based dev URLs, its wildcard for subdomain apps (a region without
// one leaves subdomain apps on the primary's). Without JavaScript the
// links are the primary's. The selector is shown only when there is a
// region besides the primary.

// regionChoice is a region as the selector offers it.
type regionChoice struct {
	Name, DisplayName string
	// PathAppURL is the region's access URL without a trailing slash, the
	// base of its dev URLs and of its /healthz.
	PathAppURL string
	// AppBase is "<scheme>://<wildcard host with port>" of its subdomain
	// apps, "" when it serves none.
	AppBase string
}

// regionChoices are the regions the visitor may choose from; none when
// the API answers nothing usable or only the primary (the page then shows
// no selector).
func regionChoices(r *http.Request, c *codersdk.Client) []regionChoice {
	regions, err := c.Regions(r.Context())
	if err != nil {
		return nil
	}
	var out []regionChoice
	for _, rg := range regions {
		if !rg.Healthy {
			continue
		}
		if choice, ok := regionChoiceOf(rg); ok {
			out = append(out, choice)
		}
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// regionChoiceOf is rg as the selector offers it; false for a region
// without a usable URL (a proxy that has not registered one yet).
func regionChoiceOf(rg codersdk.Region) (regionChoice, bool) {
	u, err := url.Parse(rg.PathAppURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return regionChoice{}, false
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = strings.TrimSuffix(u.Path, "/"), "", "", ""
	choice := regionChoice{Name: rg.Name, DisplayName: rg.DisplayName, PathAppURL: u.String()}
	if choice.DisplayName == "" {
		choice.DisplayName = rg.Name
	}
	if w := rg.WildcardHostname; w != "" {
		// The primary answers its pattern with the port app URLs use; a
		// proxy's app URLs take its access URL's port unless the wildcard
		// names one.
		if _, _, err := net.SplitHostPort(w); err != nil && u.Port() != "" {
			w = net.JoinHostPort(w, u.Port())
		}
		choice.AppBase = u.Scheme + "://" + w
	}
	return choice, true
}

// allowRegions lets the page's scripts reach the regions' origins (the
// latency probe of /healthz) by adding them to the connect-src of the
// Content-Security-Policy ServeHTTP set.
func allowRegions(w http.ResponseWriter, regions []regionChoice) {
	if len(regions) == 0 {
		return
	}
	var origins []string
	for _, rg := range regions {
		origins = append(origins, rg.PathAppURL)
	}
	csp := w.Header().Get("Content-Security-Policy")
	w.Header().Set("Content-Security-Policy", strings.Replace(csp, "connect-src 'self'", "connect-src 'self' "+strings.Join(origins, " "), 1))
}
