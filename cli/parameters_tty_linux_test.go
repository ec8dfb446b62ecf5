package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/testwait"
)

// openPTY returns a pseudo-terminal: what the CLI reads as its stdin (the
// slave) and where a person types (the master).
func openPTY(t *testing.T) (keyboard, stdin *os.File) {
	t.Helper()
	master, slave := newPTY(t)
	// The terminal echoes what is typed back to the master; nobody reads it.
	go func() { _, _ = io.Copy(io.Discard, master) }()
	return master, slave
}

// waitStdout waits until the run's stdout, after the first skip bytes,
// shows want, and returns how far it has been read.
func (r *cliRun) waitStdout(t *testing.T, skip int, want string) int {
	t.Helper()
	read := 0
	testwait.For(t, 20*time.Second, fmt.Sprintf("coder %s: stdout showing %q", strings.Join(r.args[:2], " "), want), func() (bool, string) {
		out := r.stdout.String()
		if i := strings.Index(out[skip:], want); i >= 0 {
			read = skip + i + len(want)
			return true, ""
		}
		select {
		case code := <-r.done:
			t.Fatalf("coder %s exited %d before asking %q\nstdout: %s\nstderr: %s", strings.Join(r.args[:2], " "), code, want, out, r.stderr)
		default:
		}
		return false, fmt.Sprintf("stdout: %s\nstderr: %s", out, r.stderr)
	})
	return read
}

// TestParametersOnTerminal runs coder create and coder update with stdin a
// real terminal: create asks for every parameter not given and confirms;
// update asks only for the parameter the new version adds.
func TestParametersOnTerminal(t *testing.T) {
	t.Parallel()
	p := newParamsDeployment(t)
	tpl := p.createTemplate(t)
	keyboard, stdin := openPTY(t)
	typeLine := func(s string) {
		t.Helper()
		if _, err := keyboard.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
	}

	r := p.runCLI(t, stdin, "create", "tty", "--template", "params", "--parameter", "gpu=true")
	seen := 0
	for _, step := range []struct{ question, answer string }{
		{"Project (project)\n  Lower-case project name.\nEnter a value: ", "Apollo"},
		{"  project must be lower-case letters (value \"Apollo\" does not match \"^[a-z]+$\")\nEnter a value: ", "apollo"},
		{"region\n  1) Europe (eu)\n  2) United States (us)\nChoose 1-2 [Europe]: ", "2"},
		{"CPU cores (cpu)\nEnter a number from 1 to 8 [2]: ", ""},
		{"tools\nEnter values separated by commas (or a JSON list) [git, make]: ", "git,go"},
		{"Confirm create? (yes/no) ", "yes"},
	} {
		seen = r.waitStdout(t, seen, step.question)
		typeLine(step.answer)
	}
	job := p.build(t, r)
	r.mustSucceed(t)
	wantParams(t, "the build of create on a terminal", job.RichParameterValues, map[string]string{
		"project": "apollo", "region": "us", "cpu": "2", "gpu": "true", "tools": `["git","go"]`,
	})
	if strings.Contains(r.stdout.String(), "gpu\n") {
		t.Errorf("create asked for gpu, which --parameter gave:\n%s", r.stdout)
	}

	v2 := p.importVersion(t, tpl.ID, paramsV2)
	if err := p.admin.UpdateActiveTemplateVersion(context.Background(), tpl.ID, codersdk.UpdateActiveTemplateVersion{ID: v2.ID}); err != nil {
		t.Fatal(err)
	}
	r = p.runCLI(t, stdin, "update", "tty")
	seen = r.waitStdout(t, 0, "Disk size (disk)\nEnter a number: ")
	typeLine("")
	seen = r.waitStdout(t, seen, "  a value is required\nEnter a number: ")
	typeLine("30")
	job = p.build(t, r)
	r.mustSucceed(t)
	if job.TemplateVersionID != v2.ID {
		t.Errorf("update built version %s, want %s", job.TemplateVersionID, v2.ID)
	}
	wantParams(t, "the build of update on a terminal", job.RichParameterValues, map[string]string{"disk": "30", "project": "apollo", "region": "us"})
	if out := r.stdout.String(); strings.Contains(out, "Project") || strings.Contains(out, "Choose") || strings.Contains(out, "(build option)") {
		t.Errorf("update asked for more than the new parameter:\n%s", out)
	}
}
