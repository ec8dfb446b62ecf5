package provisionerd

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	tfjson "github.com/hashicorp/terraform-json"

	"airgapcoder/coderd/codersdk"
)

// resourcesOf reads resources, coder_agents and coder_apps out of a state or
// plan module. Agents are attached to the resource that depends on them
// (the one that runs the init script); an agent nothing depends on gets a
// resource of its own. Agents are reported only for start builds: a stopped
// workspace runs none.
func resourcesOf(root *tfjson.StateModule, withAgents bool) []codersdk.ProvisionedResource {
	type agentEntry struct {
		address string
		agent   codersdk.ProvisionedAgent
		used    bool
	}
	var agents []*agentEntry
	apps := map[string][]codersdk.ProvisionedApp{} // agent id -> apps
	type res struct {
		r         codersdk.ProvisionedResource
		dependsOn []string
	}
	var resources []res

	var walk func(m *tfjson.StateModule)
	walk = func(m *tfjson.StateModule) {
		if m == nil {
			return
		}
		for _, r := range m.Resources {
			if r.Mode != tfjson.ManagedResourceMode {
				continue
			}
			name := r.Name
			if r.Index != nil {
				name = fmt.Sprintf("%s[%v]", r.Name, r.Index)
			}
			switch r.Type {
			case "coder_agent":
				a := codersdk.ProvisionedAgent{
					ID: str(r.AttributeValues["id"]), Name: name, Token: str(r.AttributeValues["token"]),
					OperatingSystem: str(r.AttributeValues["os"]), Architecture: str(r.AttributeValues["arch"]),
					Directory: str(r.AttributeValues["dir"]), StartupScript: str(r.AttributeValues["startup_script"]),
					Env: strMap(r.AttributeValues["env"]), ConnectionTimeoutSeconds: int32(num(r.AttributeValues["connection_timeout"])),
				}
				agents = append(agents, &agentEntry{address: r.Address, agent: a})
			case "coder_app":
				agentID := str(r.AttributeValues["agent_id"])
				apps[agentID] = append(apps[agentID], codersdk.ProvisionedApp{
					Slug: str(r.AttributeValues["slug"]), DisplayName: str(r.AttributeValues["display_name"]),
					URL: str(r.AttributeValues["url"]), Port: int32(num(r.AttributeValues["port"])), Share: str(r.AttributeValues["share"]),
				})
			default:
				resources = append(resources, res{r: codersdk.ProvisionedResource{Type: r.Type, Name: name}, dependsOn: r.DependsOn})
			}
		}
		for _, c := range m.ChildModules {
			walk(c)
		}
	}
	walk(root)

	out := make([]codersdk.ProvisionedResource, 0, len(resources))
	for _, r := range resources {
		if withAgents {
			for _, a := range agents {
				if a.used || !dependsOn(r.dependsOn, a.address) {
					continue
				}
				a.used = true
				a.agent.Apps = apps[a.agent.ID]
				r.r.Agents = append(r.r.Agents, a.agent)
			}
		}
		out = append(out, r.r)
	}
	if withAgents {
		for _, a := range agents {
			if !a.used {
				a.agent.Apps = apps[a.agent.ID]
				out = append(out, codersdk.ProvisionedResource{Type: "coder_agent", Name: a.agent.Name, Agents: []codersdk.ProvisionedAgent{a.agent}})
			}
		}
	}
	return out
}

func dependsOn(deps []string, address string) bool {
	for _, d := range deps {
		if d == address || strings.HasPrefix(d, address+"[") {
			return true
		}
	}
	return false
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// num reads a number from show -json, which may decode as float64 or
// json.Number.
func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case json.Number:
		f, _ := n.Float64()
		return f
	}
	return 0
}

func strMap(v any) map[string]string {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, val := range m {
		out[k] = fmt.Sprint(val)
	}
	return out
}

// Template variables are the template's parameters: a variable with no
// default is required, its default becomes the parameter's default.
func parameterOf(v *tfconfig.Variable) codersdk.TemplateVersionParameter {
	p := codersdk.TemplateVersionParameter{
		Name: v.Name, Description: v.Description, Type: parameterType(v.Type), Required: v.Required, Mutable: true,
	}
	if v.Default != nil {
		p.DefaultValue = fmt.Sprint(v.Default)
	}
	return p
}

func parameterType(tfType string) string {
	switch tfType {
	case "number", "bool":
		return tfType
	}
	return "string"
}

// placeholder is a value for a required variable while importing.
func placeholder(tfType string) string {
	switch tfType {
	case "number":
		return "0"
	case "bool":
		return "false"
	}
	return ""
}

func sortedVariableNames(m *tfconfig.Module) []string {
	names := make([]string, 0, len(m.Variables))
	for n := range m.Variables {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func multiWriter(ws ...io.Writer) io.Writer { return io.MultiWriter(ws...) }
