package codersdk

import (
	"context"
	"net/http"
	"time"
)

// Replica is one coderd process serving the deployment (GET
// /api/v2/replicas, owners only). Replicas share one PostgreSQL database
// and list themselves there.
type Replica struct {
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	// RelayAddress is where the other replicas reach this one.
	RelayAddress string    `json:"relay_address"`
	Version      string    `json:"version"`
	CreatedAt    time.Time `json:"created_at"`
	// LastHeartbeatAt is when it last said it is alive (the database's
	// clock).
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
}

// Replicas lists the live replicas, oldest first.
func (c *Client) Replicas(ctx context.Context) ([]Replica, error) {
	return doJSON[[]Replica](ctx, c, http.MethodGet, "/api/v2/replicas", nil)
}
