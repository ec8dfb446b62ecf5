package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"airgapcoder/codersdk"
)

// listSeedSize is how many workspaces BenchmarkListWorkspaces10k seeds, over
// listSeedPerUser workspaces per user.
const (
	listSeedSize    = 10_000
	listSeedPerUser = 20
)

// BenchmarkListWorkspaces10k measures GET /api/v2/workspaces as the owner
// over 10,000 seeded workspaces: the whole list, and the first page of 100.
// Side by side, in the same iterations, it runs the lower bound: the count
// and one select of the same rows (workspace, owner, template, latest build,
// its version, initiator, job, resource and agent) straight from pgx, read
// as raw bytes without decoding. ns/op is the API's; raw_ns/op the lower
// bound's; api_vs_raw_ratio is one over the other. resp_bytes is the JSON
// body, raw_bytes what PostgreSQL sent for the row values.
func BenchmarkListWorkspaces10k(b *testing.B) {
	f := newFleet(b)
	took := seedWorkspaces(b, f, listSeedSize, listSeedPerUser)
	b.Logf("seeded %d workspaces over %d users in %s", listSeedSize, listSeedSize/listSeedPerUser, took.Round(time.Millisecond))

	ctx := context.Background()
	raw, err := pgxpool.New(ctx, f.d.DatabaseURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(raw.Close)

	for _, tc := range []struct {
		name  string
		limit int
	}{
		{"all", 0},
		{"limit=100", 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			want := listSeedSize
			if tc.limit > 0 {
				want = tc.limit
			}
			url := f.d.URL.String() + "/api/v2/workspaces"
			if tc.limit > 0 {
				url += fmt.Sprintf("?limit=%d", tc.limit)
			}
			checkWorkspaceList(b, url, f.owner.SessionToken, want)

			var apiTime, rawTime time.Duration
			var respBytes, rawBytes int64
			for b.Loop() {
				start := time.Now()
				n, err := getBody(ctx, url, f.owner.SessionToken)
				if err != nil {
					b.Fatal(err)
				}
				apiTime += time.Since(start)
				respBytes = n

				start = time.Now()
				rows, n, err := rawWorkspaces(ctx, raw, tc.limit)
				if err != nil {
					b.Fatal(err)
				}
				rawTime += time.Since(start)
				rawBytes = n
				if rows != want {
					b.Fatalf("raw query: got %d rows, want %d", rows, want)
				}
			}
			iters := time.Duration(b.N)
			api, lower := apiTime/iters, rawTime/iters
			b.ReportMetric(float64(api.Nanoseconds()), "ns/op")
			b.ReportMetric(float64(lower.Nanoseconds()), "raw_ns/op")
			b.ReportMetric(float64(api)/float64(lower), "api_vs_raw_ratio")
			b.ReportMetric(float64(respBytes), "resp_bytes")
			b.ReportMetric(float64(rawBytes), "raw_bytes")
			b.Logf("%s: API %s (%d bytes of JSON), raw %s (%d bytes of values), api_vs_raw_ratio %.2f",
				tc.name, api.Round(time.Microsecond), respBytes, lower.Round(time.Microsecond), rawBytes, float64(api)/float64(lower))
		})
	}
}

// checkWorkspaceList decodes one answer fully: the benchmark only counts
// bytes, so it must first know that they are the right ones.
func checkWorkspaceList(tb testing.TB, url, token string, want int) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set(codersdk.SessionTokenHeader, token)
	resp, err := loopbackClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var list codersdk.WorkspacesResponse
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		tb.Fatalf("decode workspaces: %v", err)
	}
	if list.Count != listSeedSize || len(list.Workspaces) != want {
		tb.Fatalf("got count %d and %d workspaces, want %d and %d", list.Count, len(list.Workspaces), listSeedSize, want)
	}
}

// getBody fetches url and returns the body's length.
func getBody(ctx context.Context, url, token string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(codersdk.SessionTokenHeader, token)
	resp, err := loopbackClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return n, fmt.Errorf("read workspaces: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return n, fmt.Errorf("get workspaces: status %d", resp.StatusCode)
	}
	return n, nil
}

// rawListQuery selects what the API returns for each live workspace, in the
// API's order. It picks the page from workspaces and owners alone and joins
// the rest for the page's rows only, the cheapest way to page. A NULL limit
// is no limit.
const rawListQuery = `WITH page AS (
		SELECT w.id, u.username, w.name FROM workspaces w JOIN users u ON u.id = w.owner_id
		WHERE NOT w.deleted ORDER BY u.username, w.name LIMIT $1)
	SELECT w.id, w.organization_id, w.owner_id, p.username, w.template_id, t.name, t.active_version_id, w.name,
		w.created_at, w.updated_at,
		b.id, b.template_version_id, tv.name, b.build_number, b.transition, b.initiator_id, iu.username, b.reason,
		b.rich_parameter_values, b.created_at, b.updated_at,
		j.id, j.created_at, j.updated_at, j.started_at, j.completed_at, j.canceled_at, j.error, j.error_code, j.organization_id,
		j.initiator_id, j.type, j.input, j.tags, j.file_id, j.worker_id,
		r.id, r.created_at, r.transition, r.type, r.name,
		a.id, a.created_at, a.name, a.operating_system, a.architecture, a.directory, a.lifecycle_state,
		a.first_connected_at, a.last_connected_at, a.disconnected_at
	FROM page p
	JOIN workspaces w ON w.id = p.id
	JOIN templates t ON t.id = w.template_id
	JOIN LATERAL (SELECT * FROM workspace_builds WHERE workspace_id = w.id ORDER BY build_number DESC LIMIT 1) b ON true
	JOIN template_versions tv ON tv.id = b.template_version_id
	JOIN users iu ON iu.id = b.initiator_id
	JOIN provisioner_jobs j ON j.id = b.job_id
	LEFT JOIN workspace_resources r ON r.job_id = j.id
	LEFT JOIN workspace_agents a ON a.resource_id = r.id
	ORDER BY p.username, p.name`

// rawWorkspaces runs the lower bound: the count and the select, rows read
// as raw bytes. It returns the rows and the bytes of their values.
func rawWorkspaces(ctx context.Context, pool *pgxpool.Pool, limit int) (rows int, size int64, err error) {
	var count int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM workspaces WHERE NOT deleted`).Scan(&count); err != nil {
		return 0, 0, fmt.Errorf("count workspaces: %w", err)
	}
	var lim any
	if limit > 0 {
		lim = limit
	}
	rs, err := pool.Query(ctx, rawListQuery, lim)
	if err != nil {
		return 0, 0, fmt.Errorf("select workspaces: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		rows++
		for _, v := range rs.RawValues() {
			size += int64(len(v))
		}
	}
	return rows, size, rs.Err()
}
