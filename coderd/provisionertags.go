package coderd

import (
	"fmt"
	"maps"
	"regexp"

	"airgapcoder/codersdk"
)

// Provisioner tags, as shared/seeds/provisioners.txt describes them:
//
//   - every job and daemon carries "scope" and "owner";
//   - untagged templates and daemons are scope=organization, owner="";
//   - scope=user binds the tag set to one user: owner=<user id>;
//   - a daemon takes a job when the job's tags are a subset of its own.
//
// So an untagged daemon takes only untagged jobs, a tagged daemon takes jobs
// whose tags it all carries plus untagged ones, and a scope=user daemon takes
// only scope=user jobs of its own user.

var tagRe = regexp.MustCompile(`^[a-zA-Z0-9_.\-]{1,64}$`)

// normalizeTags validates tags and adds scope and owner. ownerID is the user
// a scope=user tag set belongs to.
func normalizeTags(tags map[string]string, ownerID string) (map[string]string, error) {
	out := maps.Clone(tags)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range out {
		if !tagRe.MatchString(k) {
			return nil, fmt.Errorf("tag key %q must be 1-64 letters, digits, '_', '.' or '-'", k)
		}
		if len(v) > 256 {
			return nil, fmt.Errorf("tag %s: value longer than 256 characters", k)
		}
	}
	switch out[codersdk.TagScope] {
	case "", codersdk.ProvisionerScopeOrg:
		out[codersdk.TagScope] = codersdk.ProvisionerScopeOrg
		out[codersdk.TagOwner] = ""
	case codersdk.ProvisionerScopeUser:
		out[codersdk.TagOwner] = ownerID
	default:
		return nil, fmt.Errorf("tag scope must be %q or %q, got %q", codersdk.ProvisionerScopeOrg, codersdk.ProvisionerScopeUser, out[codersdk.TagScope])
	}
	return out, nil
}

// displayTags hides the empty owner of organization-scoped tags.
func displayTags(tags map[string]string) map[string]string {
	out := maps.Clone(tags)
	if out == nil {
		return map[string]string{}
	}
	if out[codersdk.TagOwner] == "" {
		delete(out, codersdk.TagOwner)
	}
	return out
}
