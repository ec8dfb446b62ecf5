package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"airgapcoder/codersdk"
	"airgapcoder/internal/templateneeds"
)

// checkAgainstAppliance checks the template in dir against what the
// appliance's mirror serves, before anything is uploaded: a template that
// needs a provider or module the bundle lacks is refused here with the
// bundle.yaml lines to add, as the provisioner would refuse its import.
// Where the CLI cannot see the appliance (a plain coder server, or a user
// who may not read GET /api/v2/appliance), the provisioner's check is the
// one that runs.
func checkAgainstAppliance(ctx context.Context, client *codersdk.Client, dir string) error {
	a, err := client.Appliance(ctx)
	if err != nil {
		return nil
	}
	needs, err := templateneeds.Inspect(dir, dir)
	if err != nil {
		return fmt.Errorf("read template %s: %w", dir, err)
	}
	lacks, err := needs.Lacks(ctx, applianceCatalog(a))
	if err != nil {
		return err
	}
	if len(lacks) > 0 {
		return &templateneeds.MissingError{Where: "this appliance's mirror", Lacks: lacks}
	}
	return nil
}

// explainMissing prints what a *templateneeds.MissingError in err lists
// (the lacks and the bundle.yaml lines, which need their lines) to stderr,
// and returns err with that part summed up, for the one error line.
func (inv *invocation) explainMissing(err error) error {
	var missing *templateneeds.MissingError
	if !errors.As(err, &missing) {
		return err
	}
	full := missing.Error()
	fmt.Fprintln(inv.stderr, full)
	short := fmt.Sprintf("the template needs %s that %s does not hold (listed above)", plural(len(missing.Lacks), "thing"), missing.Where)
	return errors.New(strings.Replace(err.Error(), full, short, 1))
}

// applianceCatalog answers templateneeds from an appliance's overview.
type applianceCatalog codersdk.Appliance

func (a applianceCatalog) ProviderVersions(_ context.Context, address string) ([]string, error) {
	var out []string
	for _, p := range a.Providers {
		if p.Source == address {
			out = append(out, p.Version)
		}
	}
	return out, nil
}

func (a applianceCatalog) ModuleVersions(_ context.Context, source string) ([]string, error) {
	var out []string
	for _, m := range a.Modules {
		if m.Source == source {
			out = append(out, m.Version)
		}
	}
	return out, nil
}
