package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"airgapcoder/internal/atomicfile"
)

// What the egress guard refused, and what the supervisor restarted, while
// the appliance ran: the product's own
// clients and, through the provisioners' egress proxy, terraform, git and
// providers. `up` keeps it in DIR/run/egress.json (each refusal rewrites
// it); `status` shows it, so an operator sees that a template tried to
// reach outside.

type egressReport struct {
	Refused int64     `json:"refused"`
	Last    string    `json:"last_refused,omitempty"`
	At      time.Time `json:"last_refused_at,omitzero"`
}

func (l Layout) egressReport() string { return filepath.Join(l.Run(), "egress.json") }

// recordRefusal writes the report after a refusal of addr.
func recordRefusal(l Layout, addr string, total int64, now time.Time) error {
	b, err := json.Marshal(egressReport{Refused: total, Last: addr, At: now.UTC()})
	if err != nil {
		return err
	}
	return atomicfile.Write(l.egressReport(), b, 0o644)
}

// egressComponent is the status row of the egress guard.
func egressComponent(l Layout) Component {
	c := Component{Name: "egress", State: "ok", Detail: "nothing refused"}
	b, err := os.ReadFile(l.egressReport())
	if errors.Is(err, fs.ErrNotExist) {
		return c
	}
	var r egressReport
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		return Component{Name: "egress", State: "unknown", Detail: err.Error()}
	}
	c.Detail = fmt.Sprintf("%d connections refused; the last to %s at %s", r.Refused, r.Last, r.At.Format(time.RFC3339))
	return c
}

// restartReport is what the supervisor restarted while the appliance ran,
// kept beside the egress report (DIR/run/restarts.json) for status.
type restartReport map[string]restartRecord

type restartRecord struct {
	Restarts  int       `json:"restarts"`
	LastError string    `json:"last_error"`
	At        time.Time `json:"at"`
}

func (l Layout) restartReport() string { return filepath.Join(l.Run(), "restarts.json") }

// recordRestart notes the restart of component.
func recordRestart(l Layout, component string, restarts int, cause error, now time.Time) error {
	r := readRestarts(l)
	r[component] = restartRecord{Restarts: restarts, LastError: cause.Error(), At: now.UTC()}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(l.restartReport(), b, 0o644)
}

func readRestarts(l Layout) restartReport {
	r := restartReport{}
	if b, err := os.ReadFile(l.restartReport()); err == nil {
		_ = json.Unmarshal(b, &r)
	}
	return r
}

// withRestarts adds what the supervisor did to a component's status row.
func withRestarts(l Layout, c Component) Component {
	if r, ok := readRestarts(l)[c.Name]; ok {
		c.Detail += fmt.Sprintf("; restarted %d times, the last at %s: %s", r.Restarts, r.At.Format(time.RFC3339), r.LastError)
	}
	return c
}
