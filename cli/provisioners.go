package cli

import (
	"context"

	"github.com/spf13/cobra"

	"airgapcoder/codersdk"
)

func (inv *invocation) provisionerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "provisioner", Aliases: []string{"provisioners"}, Short: "Inspect provisioner daemons"}
	list := listCommand(inv, &cobra.Command{Use: "list", Short: "List provisioner daemons with tags, version and last seen"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.ProvisionerDaemon, error) {
			return client.ProvisionerDaemons(ctx)
		},
		[]string{"NAME", "STATUS", "TAGS", "VERSION", "LAST SEEN"},
		func(d codersdk.ProvisionerDaemon) []string {
			seen := "never"
			if d.LastSeenAt != nil {
				seen = ago(*d.LastSeenAt)
			}
			return []string{d.Name, d.Status, tagString(d.Tags), d.Version, seen}
		})
	cmd.AddCommand(list)
	return cmd
}

// replicasCmd lists the coderd replicas serving the deployment.
func (inv *invocation) replicasCmd() *cobra.Command {
	return listCommand(inv, &cobra.Command{Use: "replicas", Short: "List the coderd replicas serving the deployment (owners)"},
		func(ctx context.Context, client *codersdk.Client) ([]codersdk.Replica, error) {
			return client.Replicas(ctx)
		},
		[]string{"HOST", "RELAY ADDRESS", "VERSION", "STARTED", "LAST HEARTBEAT"},
		func(r codersdk.Replica) []string {
			return []string{r.Hostname, r.RelayAddress, r.Version, ago(r.CreatedAt), ago(r.LastHeartbeatAt)}
		})
}
