package site_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"airgapcoder/coderd/coderdtest"
	"airgapcoder/codersdk"
)

// TestBrowserImportLogFollows: a template version whose import is still
// running shows its log growing without a reload, and the page shows the
// outcome once the import ends.
func TestBrowserImportLogFollows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, admin, daemon := coderdtest.NewWithDaemon(t, coderdtest.Options{}, "fake")
	tpl, _ := coderdtest.ImportTemplate(t, admin, daemon, "slow", codersdk.CreateTemplateVersionRequest{}, codersdk.CompleteJobRequest{})
	v := coderdtest.UploadVersion(t, admin, tpl.ID, coderdtest.MinimalTemplate, nil)
	job := daemon.Acquire(t, 20*time.Second)
	if job == nil || job.TemplateVersionID != v.ID {
		t.Fatalf("acquired %+v, want the import of %s", job, v.ID)
	}
	logLine := func(text string) {
		t.Helper()
		if _, err := daemon.Client.UpdateJob(ctx, daemon.ID, job.JobID, codersdk.UpdateJobRequest{Logs: []codersdk.ProvisionerJobLogInput{
			{CreatedAt: time.Now(), Source: codersdk.LogSourceProvisioner, Level: codersdk.LogLevelInfo, Stage: "Planning", Output: text},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	logLine("before the page opened")

	b := newBrowser(t, d.URL)
	b.do("login page", chromedp.Navigate(b.url("/login")))
	b.signIn("admin@example.com", coderdtest.FirstUserPassword)
	b.do("version page", chromedp.Navigate(b.url(fmt.Sprintf("/templates/slow/versions/%s", v.Name))), chromedp.WaitVisible(chromedp.CSS("#import-log")))
	b.waitText("the import is running", "#import-running", "still running", 5*time.Second)
	b.waitText("the first line", "#import-log", "[Planning] before the page opened", 10*time.Second)
	for i := range 3 {
		line := fmt.Sprintf("line %d while watching", i)
		logLine(line)
		b.waitText("a new line arrives without a reload", "#import-log", line, 10*time.Second)
	}
	daemon.Complete(t, job.JobID, codersdk.CompleteJobRequest{})
	b.waitText("the outcome after the import ended", "main", "Import finished", 15*time.Second)
	if body := get(b, "read", chromedp.Text(chromedp.CSS("main"))); strings.Contains(body, "still running") {
		t.Errorf("after the import ended the page still says it runs: %q", body)
	}
	b.check()
}
