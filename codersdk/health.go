package codersdk

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Healthz asks GET /healthz: nil when the deployment answers 200 (its
// database and every health check pass), else what it said.
func (c *Client) Healthz(ctx context.Context) error {
	resp, err := c.Request(ctx, http.MethodGet, "/healthz", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// HealthReport is GET /api/v2/debug/health (owners): each component's
// check.
type HealthReport struct {
	Healthy    bool              `json:"healthy"`
	Time       time.Time         `json:"time"`
	Components []ComponentHealth `json:"components"`
}

// ComponentHealth is one component's check.
type ComponentHealth struct {
	Name       string `json:"name"`
	Healthy    bool   `json:"healthy"`
	Error      string `json:"error,omitempty"`
	TookMillis int64  `json:"took_ms"`
}

// DebugHealth returns each component's health (owners only).
func (c *Client) DebugHealth(ctx context.Context) (HealthReport, error) {
	return doJSON[HealthReport](ctx, c, http.MethodGet, "/api/v2/debug/health", nil)
}
