package cli

import (
	"strings"
	"testing"
	"time"

	"airgapcoder/codersdk"
)

func TestDescribeDormancy(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	del := at.Add(7 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		w    codersdk.Workspace
		want []string
	}{
		{"active", codersdk.Workspace{}, nil},
		{"dormant", codersdk.Workspace{ID: "w1", Name: "dev", DormantAt: &at}, []string{"Dormant: since", "`coder dormant off dev`"}},
		{"dormant, deleted later", codersdk.Workspace{ID: "w1", Name: "dev", DormantAt: &at, DeletingAt: &del}, []string{"Dormant: since", "; deleted at ", " unless made active"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := describeDormancy(tc.w)
			if tc.want == nil && got != "" {
				t.Errorf("got %q, want no line", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got %q, want it to contain %q", got, w)
				}
			}
		})
	}
}
