package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"airgapcoder/agent/agentstat"
)

// statConfig is what `coder stat` and its subcommands run with.
type statConfig struct {
	Host   bool
	Path   string
	Prefix string
	Output string
}

// statCmd is `coder stat`: what the metadata scripts of Coder's templates
// call inside a workspace (`coder stat cpu`, `coder stat mem --host`,
// `coder stat disk --path $HOME`).
func (inv *invocation) statCmd() *cobra.Command {
	var cfg statConfig
	cmd := &cobra.Command{
		Use:   "stat",
		Short: "Show CPU, memory and disk use inside a workspace (for agent metadata scripts)",
		Long: `Show CPU, memory and disk use of the machine this runs on, the way Coder's
templates show them in agent metadata blocks, e.g. script = "coder stat cpu".
Inside a container CPU and memory are the container's (its cgroup limits); --host
shows the host's. Without a subcommand it shows everything in one table.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return inv.statAll(cmd.Context(), cfg)
		},
	}
	formatFlag(cmd, &cfg.Output, "table", "json")
	cmd.AddCommand(inv.statCPUCmd(), inv.statMemCmd(), inv.statDiskCmd())
	return cmd
}

func (inv *invocation) statCPUCmd() *cobra.Command {
	var cfg statConfig
	cmd := &cobra.Command{
		Use:   "cpu",
		Short: "Show CPU cores in use out of those available, e.g. 0.5/2 cores (25%)",
	}
	cmd.Flags().BoolVar(&cfg.Host, "host", false, "Show the host's CPU even inside a container")
	return inv.statSubcommand(cmd, &cfg, func(ctx context.Context) (agentstat.Result, error) {
		s, err := agentstat.New()
		if err != nil {
			return agentstat.Result{}, err
		}
		return statCPU(ctx, s, cfg.Host)
	})
}

func (inv *invocation) statMemCmd() *cobra.Command {
	var cfg statConfig
	cmd := &cobra.Command{
		Use:   "mem",
		Short: "Show memory in use out of the total, e.g. 1.2/7.7 GiB (16%)",
	}
	cmd.Flags().BoolVar(&cfg.Host, "host", false, "Show the host's memory even inside a container")
	statPrefixFlag(cmd, &cfg)
	return inv.statSubcommand(cmd, &cfg, func(context.Context) (agentstat.Result, error) {
		s, err := agentstat.New()
		if err != nil {
			return agentstat.Result{}, err
		}
		return statMemory(s, cfg.Host)
	})
}

func (inv *invocation) statDiskCmd() *cobra.Command {
	var cfg statConfig
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "Show space in use on a filesystem out of its size, e.g. 12/98 GiB (12%)",
	}
	cmd.Flags().StringVar(&cfg.Path, "path", "/", "A path on the filesystem to show")
	statPrefixFlag(cmd, &cfg)
	return inv.statSubcommand(cmd, &cfg, func(context.Context) (agentstat.Result, error) {
		return agentstat.Disk(cfg.Path)
	})
}

// statPrefixFlag adds --prefix, the unit sizes in bytes print in (mem and
// disk).
func statPrefixFlag(cmd *cobra.Command, cfg *statConfig) {
	cmd.Flags().StringVar(&cfg.Prefix, "prefix", "Gi", "Unit prefix of the text output: Ki, Mi, Gi or Ti")
}

// statSubcommand makes cmd one of `coder stat cpu|mem|disk`: -o text or
// json, and a run that prints what measure returns. A command with
// --prefix (statPrefixFlag) refuses an unknown one before measuring and
// prints sizes in it.
func (inv *invocation) statSubcommand(cmd *cobra.Command, cfg *statConfig, measure func(context.Context) (agentstat.Result, error)) *cobra.Command {
	formatFlag(cmd, &cfg.Output, "text", "json")
	hasPrefix := cmd.Flags().Lookup("prefix") != nil
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var prefix agentstat.Prefix
		if hasPrefix {
			p, err := agentstat.ParsePrefix(cfg.Prefix)
			if err != nil {
				return usageErrorf("unknown --prefix %q: use Ki, Mi, Gi or Ti", cfg.Prefix)
			}
			prefix = p
		}
		r, err := measure(cmd.Context())
		if err != nil {
			return err
		}
		if hasPrefix {
			r.Prefix = prefix
		}
		if cfg.Output == "json" {
			return writeJSON(inv.stdout, r)
		}
		_, err = fmt.Fprintln(inv.stdout, r.String())
		return err
	}
	return cmd
}

// statCPU measures the container's CPU inside a container, else (or with
// host) the host's.
func statCPU(ctx context.Context, s *agentstat.Statter, host bool) (agentstat.Result, error) {
	if !host && s.IsContainerized() {
		return s.ContainerCPU(ctx)
	}
	return s.HostCPU(ctx)
}

func statMemory(s *agentstat.Statter, host bool) (agentstat.Result, error) {
	if !host && s.IsContainerized() {
		return s.ContainerMemory()
	}
	return s.HostMemory()
}

// statAll prints the host's CPU and memory, the home folder's disk and,
// inside a container, the container's CPU and memory.
func (inv *invocation) statAll(ctx context.Context, cfg statConfig) error {
	s, err := agentstat.New()
	if err != nil {
		return err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/"
	}
	type column struct {
		name string
		get  func() (agentstat.Result, error)
	}
	columns := []column{
		{"host_cpu", func() (agentstat.Result, error) { return s.HostCPU(ctx) }},
		{"host_memory", s.HostMemory},
		{"home_disk", func() (agentstat.Result, error) { return agentstat.Disk(home) }},
	}
	if s.IsContainerized() {
		columns = append(columns,
			column{"container_cpu", func() (agentstat.Result, error) { return s.ContainerCPU(ctx) }},
			column{"container_memory", s.ContainerMemory})
	}
	results := map[string]agentstat.Result{}
	var header, row []string
	for _, c := range columns {
		r, err := c.get()
		if err != nil {
			return fmt.Errorf("measure %s: %w", c.name, err)
		}
		if r.Unit == "B" {
			r.Prefix = agentstat.PrefixGibi
		}
		results[c.name] = r
		header = append(header, strings.ToUpper(strings.ReplaceAll(c.name, "_", " ")))
		row = append(row, r.String())
	}
	return render(inv.stdout, cfg.Output, results, header, func() [][]string { return [][]string{row} })
}
