package coderd

import (
	"fmt"
	"strings"
)

// oidcRefusal is a sign-in the deployment refuses: Reason is a short code
// for the audit log, Message what the error page tells the user.
type oidcRefusal struct {
	Reason  string
	Message string
}

func (r *oidcRefusal) Error() string { return r.Message }

func refuse(reason, format string, args ...any) *oidcRefusal {
	return &oidcRefusal{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// oidcIdentity is what a sign-in learned from the ID token and userinfo.
type oidcIdentity struct {
	Subject  string
	Email    string
	Verified bool
	// Username is the claim of UsernameField made a valid username (""
	// when there was nothing usable).
	Username string
	Name     string
}

// mergeClaims adds the userinfo claims the ID token lacks: the ID token's
// own (signed, checked) claims win.
func mergeClaims(idToken, userinfo map[string]any) map[string]any {
	out := make(map[string]any, len(idToken)+len(userinfo))
	for k, v := range userinfo {
		out[k] = v
	}
	for k, v := range idToken {
		out[k] = v
	}
	return out
}

// identityFromClaims applies the deployment's rules to a user's claims, as
// Coder does: the email comes from EmailField and is required; an
// email_verified claim that is false refuses the sign-in unless
// IgnoreEmailVerified (a missing one does not); with EmailDomain set the
// email's domain must be one of them; the username comes from
// UsernameField, else the email's local part.
func identityFromClaims(cfg OIDCConfig, subject string, claims map[string]any) (oidcIdentity, error) {
	id := oidcIdentity{Subject: subject}
	id.Email, _ = claims[cfg.EmailField].(string)
	if id.Email == "" {
		return id, refuse("no_email", "The identity provider sent no email (claim %q); ask its administrator to release it, or set --oidc-email-field", cfg.EmailField)
	}
	id.Verified = true
	if v, ok := claims["email_verified"].(bool); ok && !v {
		id.Verified = false
		if !cfg.IgnoreEmailVerified {
			return id, refuse("email_not_verified", "Your email %s is not verified at the identity provider; verify it there and sign in again", id.Email)
		}
	}
	if len(cfg.EmailDomain) > 0 {
		_, domain, _ := strings.Cut(id.Email, "@")
		ok := false
		for _, d := range cfg.EmailDomain {
			if strings.EqualFold(domain, strings.TrimPrefix(strings.TrimSpace(d), "@")) {
				ok = true
			}
		}
		if !ok {
			return id, refuse("email_domain", "Your email domain %q is not allowed to sign in here (allowed: %s)", domain, strings.Join(cfg.EmailDomain, ", "))
		}
	}
	raw, _ := claims[cfg.UsernameField].(string)
	if raw == "" {
		raw, _, _ = strings.Cut(id.Email, "@")
	}
	id.Username = usernameFrom(raw)
	id.Name, _ = claims["name"].(string)
	if validateName(id.Name) != nil {
		id.Name = ""
	}
	return id, nil
}

// usernameFrom makes a valid username of s (as Coder's UsernameFrom): runs
// of characters other than letters and digits become one hyphen, hyphens
// at either end go, and it is cut to 32 characters. "" when nothing is left.
func usernameFrom(s string) string {
	var b strings.Builder
	hyphen := false
	for _, r := range s {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			if hyphen && b.Len() > 0 {
				b.WriteByte('-')
			}
			hyphen = false
			b.WriteRune(r)
			continue
		}
		hyphen = true
	}
	out := b.String()
	if len(out) > 32 {
		out = strings.TrimRight(out[:32], "-")
	}
	if !usernameRe.MatchString(out) {
		return ""
	}
	return out
}
