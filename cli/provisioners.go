package cli

import (
	"github.com/spf13/cobra"
)

func (inv *invocation) provisionerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "provisioner", Aliases: []string{"provisioners"}, Short: "Inspect provisioner daemons"}
	list := &cobra.Command{Use: "list", Short: "List provisioner daemons with tags, version and last seen"}
	out := outputFlag(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		ds, err := client.ProvisionerDaemons(cmd.Context())
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, ds, []string{"NAME", "STATUS", "TAGS", "VERSION", "LAST SEEN"}, func() [][]string {
			rows := [][]string{}
			for _, d := range ds {
				seen := "never"
				if d.LastSeenAt != nil {
					seen = ago(*d.LastSeenAt)
				}
				rows = append(rows, []string{d.Name, d.Status, tagString(d.Tags), d.Version, seen})
			}
			return rows
		})
	}
	cmd.AddCommand(list)
	return cmd
}

// replicasCmd lists the coderd replicas serving the deployment.
func (inv *invocation) replicasCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "replicas", Short: "List the coderd replicas serving the deployment (owners)"}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		client, err := inv.client()
		if err != nil {
			return err
		}
		rs, err := client.Replicas(cmd.Context())
		if err != nil {
			return err
		}
		return render(inv.stdout, *out, rs, []string{"HOST", "RELAY ADDRESS", "VERSION", "STARTED", "LAST HEARTBEAT"}, func() [][]string {
			rows := [][]string{}
			for _, r := range rs {
				rows = append(rows, []string{r.Hostname, r.RelayAddress, r.Version, ago(r.CreatedAt), ago(r.LastHeartbeatAt)})
			}
			return rows
		})
	}
	return cmd
}
