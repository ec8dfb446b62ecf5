package coderdtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"airgapcoder/codersdk"
	"airgapcoder/internal/templatetar"
)

// TemplateTar packs files (name -> content) as a template upload.
func TemplateTar(t testing.TB, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := templatetar.Pack(dir, &buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// MinimalTemplate is a template folder with one Terraform file.
var MinimalTemplate = map[string]string{"main.tf": `resource "terraform_data" "ws" {}` + "\n"}

// UploadVersion uploads files and creates a template version with tags.
func UploadVersion(t testing.TB, c *codersdk.Client, templateID string, files map[string]string, tags map[string]string) codersdk.TemplateVersion {
	t.Helper()
	ctx := context.Background()
	up, err := c.Upload(ctx, bytes.NewReader(TemplateTar(t, files)))
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	v, err := c.CreateTemplateVersion(ctx, "default", codersdk.CreateTemplateVersionRequest{
		TemplateID: templateID, StorageMethod: "file", FileID: up.ID, Provisioner: "terraform", Tags: tags,
	})
	if err != nil {
		t.Fatalf("create template version: %v", err)
	}
	return v
}

// Daemon is a provisioner daemon driven by hand through the protocol.
type Daemon struct {
	Client *codersdk.Client
	ID     string
}

// NewDaemon registers a daemon authenticated by client (PSK or token).
func NewDaemon(t testing.TB, client *codersdk.Client, name string, tags map[string]string) *Daemon {
	t.Helper()
	d, err := client.RegisterProvisionerDaemon(context.Background(), codersdk.RegisterProvisionerDaemonRequest{Name: name, Version: "test", Tags: tags})
	if err != nil {
		t.Fatalf("register daemon %s: %v", name, err)
	}
	return &Daemon{Client: client, ID: d.ID}
}

// Acquire waits up to wait for a job.
func (d *Daemon) Acquire(t testing.TB, wait time.Duration) *codersdk.AcquiredJob {
	t.Helper()
	j, err := d.Client.AcquireJob(context.Background(), d.ID, wait)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return j
}

// Complete finishes a job with resources and state.
func (d *Daemon) Complete(t testing.TB, jobID string, req codersdk.CompleteJobRequest) {
	t.Helper()
	if err := d.Client.CompleteJob(context.Background(), d.ID, jobID, req); err != nil {
		t.Fatalf("complete job %s: %v", jobID, err)
	}
}

// RunOne acquires the next job (waiting up to 10s) and completes it with a
// state that records the build; it returns the job.
func (d *Daemon) RunOne(t testing.TB) *codersdk.AcquiredJob {
	t.Helper()
	j := d.Acquire(t, 10*time.Second)
	if j == nil {
		t.Fatal("no job arrived within 10s")
	}
	if _, err := d.Client.UpdateJob(context.Background(), d.ID, j.JobID, codersdk.UpdateJobRequest{Logs: []codersdk.ProvisionerJobLogInput{
		{CreatedAt: time.Now(), Source: codersdk.LogSourceProvisioner, Level: codersdk.LogLevelInfo, Stage: "Running", Output: "working on " + j.JobID},
	}}); err != nil {
		t.Fatalf("update job: %v", err)
	}
	req := codersdk.CompleteJobRequest{}
	if j.Type == codersdk.ProvisionerJobTypeWorkspaceBuild {
		req.State = []byte(`{"build":` + itoa(int(j.BuildNumber)) + `,"transition":"` + string(j.Transition) + `"}`)
	}
	d.Complete(t, j.JobID, req)
	return j
}

func itoa(n int) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// CreateTemplate imports files as a template named name, using d to run the
// import job.
func CreateTemplate(t testing.TB, c *codersdk.Client, d *Daemon, name string, files map[string]string, tags map[string]string) codersdk.Template {
	t.Helper()
	v := UploadVersion(t, c, "", files, tags)
	d.RunOne(t)
	tpl, err := c.CreateTemplate(context.Background(), "default", codersdk.CreateTemplateRequest{Name: name, TemplateVersionID: v.ID})
	if err != nil {
		t.Fatalf("create template: %v", err)
	}
	return tpl
}

// TemplateFiles reads a template folder (its top-level files) into the map
// TemplateTar and UploadVersion take.
func TemplateFiles(t testing.TB, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// UploadVersionRequest uploads files and creates a template version from
// req (its FileID, StorageMethod and Provisioner are filled in).
func UploadVersionRequest(t testing.TB, c *codersdk.Client, files map[string]string, req codersdk.CreateTemplateVersionRequest) codersdk.TemplateVersion {
	t.Helper()
	ctx := context.Background()
	up, err := c.Upload(ctx, bytes.NewReader(TemplateTar(t, files)))
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	req.FileID, req.StorageMethod, req.Provisioner = up.ID, "file", "terraform"
	v, err := c.CreateTemplateVersion(ctx, "default", req)
	if err != nil {
		t.Fatalf("create template version: %v", err)
	}
	return v
}

// CompleteNext acquires the next job (waiting up to 10s) and completes it
// with req; it returns the job as the daemon got it.
func (d *Daemon) CompleteNext(t testing.TB, req codersdk.CompleteJobRequest) *codersdk.AcquiredJob {
	t.Helper()
	j := d.Acquire(t, 10*time.Second)
	if j == nil {
		t.Fatal("no job arrived within 10s")
	}
	d.Complete(t, j.JobID, req)
	return j
}

// ImportTemplate creates a template named name whose import d completes
// with result (the template's parameters, variables and workspace tags, as
// a provisioner reports them). req sets the version's tags and variable
// values. It returns the template and the import job as d got it.
func ImportTemplate(t testing.TB, c *codersdk.Client, d *Daemon, name string, req codersdk.CreateTemplateVersionRequest, result codersdk.CompleteJobRequest) (codersdk.Template, *codersdk.AcquiredJob) {
	t.Helper()
	v := UploadVersionRequest(t, c, MinimalTemplate, req)
	j := d.CompleteNext(t, result)
	if j.TemplateVersionID != v.ID {
		t.Fatalf("import: got the job of version %s, want %s", j.TemplateVersionID, v.ID)
	}
	tpl, err := c.CreateTemplate(context.Background(), "default", codersdk.CreateTemplateRequest{Name: name, TemplateVersionID: v.ID})
	if err != nil {
		t.Fatalf("create template %s: %v", name, err)
	}
	return tpl, j
}
