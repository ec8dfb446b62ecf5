package provisionerd

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"airgapcoder/codersdk"
)

// Reading what terraform made: `terraform show -json` of the applied state
// (builds) or of the plan (imports) becomes the resources coderd records.
//
//   - Every managed resource whose type does not start with coder_ is a
//     resource. Data sources are not resources.
//   - A coder_agent is attached to the resource that depends on it most
//     closely (one that depends on it and on no other resource that does);
//     an agent nothing depends on gets a resource of its own, of type
//     coder_agent. Agents are reported only for start builds: a stopped
//     workspace runs none.
//   - coder_app, coder_env and coder_script belong to the agent whose id is
//     their agent_id. coder_env values are merged into the agent's env in
//     the order of their addresses, following each one's merge_strategy
//     (replace, append and prepend join with ":"; error fails the build
//     when another coder_env sets the same name); then the agent's own env
//     is applied on top: as the provider documents, a coder_env cannot
//     override a variable the coder_agent sets itself.
//   - The agent's startup_script and shutdown_script become scripts named
//     "Startup Script" and "Shutdown Script" (log sources "<agent id>-startup"
//     and "<agent id>-shutdown"), as Coder converts them; a coder_script's
//     log source is its own id.
//   - A coder_metadata belongs to the resource whose id is its resource_id.
//     In a plan ids are not known yet; there the resource its resource_id
//     expression refers to is used.

// entry is a resource being converted.
type entry struct {
	r        *tfjson.StateResource
	resource codersdk.ProvisionedResource
}

// converter gathers the resources of one state or plan.
type converter struct {
	resources []*tfjson.StateResource // managed, in address order
	// refs maps a resource's configuration address (no instance keys) to
	// the addresses its configuration refers to; plans only.
	refs map[string][]string
	// metadataRefs maps a coder_metadata's configuration address to what
	// its resource_id refers to; plans only.
	metadataRefs map[string][]string
}

// convertResources reads the resources of root. config is the plan's
// configuration (nil for a state).
func convertResources(root *tfjson.StateModule, config *tfjson.Config, withAgents bool) ([]codersdk.ProvisionedResource, error) {
	c := &converter{refs: map[string][]string{}, metadataRefs: map[string][]string{}}
	c.collect(root)
	if config != nil && config.RootModule != nil {
		c.collectRefs(config.RootModule, "")
	}
	sort.SliceStable(c.resources, func(i, j int) bool { return c.resources[i].Address < c.resources[j].Address })

	var plain []*entry
	byAddress := map[string]*entry{}
	byID := map[string]*entry{}
	var agents []*tfjson.StateResource
	perAgent := map[string][]*tfjson.StateResource{} // agent id -> app, env, script
	var metadata []*tfjson.StateResource
	for _, r := range c.resources {
		switch r.Type {
		case "coder_agent":
			agents = append(agents, r)
		case "coder_app", "coder_env", "coder_script":
			id := str(r.AttributeValues["agent_id"])
			perAgent[id] = append(perAgent[id], r)
		case "coder_metadata":
			metadata = append(metadata, r)
		default:
			if strings.HasPrefix(r.Type, "coder_") {
				continue // the provider's other resources are not infrastructure
			}
			e := &entry{r: r, resource: codersdk.ProvisionedResource{Type: r.Type, Name: instanceName(r)}}
			plain = append(plain, e)
			byAddress[r.Address] = e
			if id := str(r.AttributeValues["id"]); id != "" {
				byID[id] = e
			}
		}
	}

	for _, m := range metadata {
		e := byID[str(m.AttributeValues["resource_id"])]
		if e == nil {
			if addr := c.metadataTarget(m, byAddress); addr != "" {
				e = byAddress[addr]
			}
		}
		if e == nil {
			continue // metadata of something that is not a resource here
		}
		applyMetadata(&e.resource, m.AttributeValues)
	}

	if withAgents {
		for _, a := range agents {
			agent, err := convertAgent(a, perAgent[str(a.AttributeValues["id"])])
			if err != nil {
				return nil, err
			}
			var candidates []*entry
			for _, e := range plain {
				if dependsOnResource(c.deps(e.r), a.Address) {
					candidates = append(candidates, e)
				}
			}
			var host *entry
			for _, cand := range candidates {
				closest := true
				for _, other := range candidates {
					if other != cand && dependsOnResource(c.deps(cand.r), other.r.Address) {
						closest = false
						break
					}
				}
				if closest {
					host = cand
					break
				}
			}
			if host == nil {
				plain = append(plain, &entry{resource: codersdk.ProvisionedResource{Type: "coder_agent", Name: agent.Name}})
				host = plain[len(plain)-1]
			}
			host.resource.Agents = append(host.resource.Agents, agent)
		}
	}

	out := make([]codersdk.ProvisionedResource, 0, len(plain))
	for _, e := range plain {
		out = append(out, e.resource)
	}
	return out, nil
}

// collect gathers the managed resources of m and its children.
func (c *converter) collect(m *tfjson.StateModule) {
	if m == nil {
		return
	}
	for _, r := range m.Resources {
		if r.Mode == tfjson.ManagedResourceMode {
			c.resources = append(c.resources, r)
		}
	}
	for _, child := range m.ChildModules {
		c.collect(child)
	}
}

// collectRefs records what each resource of a plan's configuration refers
// to; prefix is the module's address ("module.a." or "").
func (c *converter) collectRefs(m *tfjson.ConfigModule, prefix string) {
	for _, r := range m.Resources {
		if r.Mode != tfjson.ManagedResourceMode {
			continue
		}
		addr := prefix + r.Address
		var refs []string
		for _, d := range r.DependsOn {
			refs = append(refs, prefix+d)
		}
		for name, e := range r.Expressions {
			rs := expressionRefs(e, prefix)
			refs = append(refs, rs...)
			if r.Type == "coder_metadata" && name == "resource_id" {
				c.metadataRefs[addr] = rs
			}
		}
		c.refs[addr] = refs
	}
	for name, call := range m.ModuleCalls {
		if call.Module != nil {
			c.collectRefs(call.Module, prefix+"module."+name+".")
		}
	}
}

func expressionRefs(e *tfjson.Expression, prefix string) []string {
	if e == nil || e.ExpressionData == nil {
		return nil
	}
	var refs []string
	for _, r := range e.References {
		refs = append(refs, prefix+r)
	}
	for _, block := range e.NestedBlocks {
		for _, nested := range block {
			refs = append(refs, expressionRefs(nested, prefix)...)
		}
	}
	return refs
}

// deps is what r depends on: the state's dependencies, or in a plan what
// its configuration refers to.
func (c *converter) deps(r *tfjson.StateResource) []string {
	if len(r.DependsOn) > 0 {
		return r.DependsOn
	}
	return c.refs[configAddress(r.Address)]
}

// metadataTarget is the address of the resource a plan's coder_metadata
// refers to in its resource_id.
func (c *converter) metadataTarget(m *tfjson.StateResource, byAddress map[string]*entry) string {
	refs := c.metadataRefs[configAddress(m.Address)]
	for _, ref := range refs {
		if byAddress[ref] != nil {
			return ref
		}
	}
	// A reference without an instance key (count.index, each.key): the
	// instance with the metadata's own key, else the first.
	for _, ref := range refs {
		first := ""
		for _, r := range c.resources {
			if byAddress[r.Address] == nil || configAddress(r.Address) != ref {
				continue
			}
			if fmt.Sprint(r.Index) == fmt.Sprint(m.Index) {
				return r.Address
			}
			if first == "" {
				first = r.Address
			}
		}
		if first != "" {
			return first
		}
	}
	return ""
}

var instanceKeyRe = regexp.MustCompile(`\[[^\]]*\]`)

// configAddress drops the instance keys of a resource address.
func configAddress(addr string) string { return instanceKeyRe.ReplaceAllString(addr, "") }

// refersTo reports whether refs name address, an instance of it or one of
// its attributes.
func refersTo(refs []string, address string) bool {
	for _, r := range refs {
		if r == address || strings.HasPrefix(r, address+"[") || strings.HasPrefix(r, address+".") {
			return true
		}
	}
	return false
}

// dependsOnResource reports whether deps name the resource instance at
// address, or its resource as a whole (a state records "x.y" for a
// dependency on any instance of x.y).
func dependsOnResource(deps []string, address string) bool {
	if refersTo(deps, address) {
		return true
	}
	whole := configAddress(address)
	for _, d := range deps {
		if d == whole {
			return true
		}
	}
	return false
}

func instanceName(r *tfjson.StateResource) string {
	if r.Index != nil {
		return fmt.Sprintf("%s[%v]", r.Name, r.Index)
	}
	return r.Name
}

// applyMetadata copies a coder_metadata onto its resource.
func applyMetadata(res *codersdk.ProvisionedResource, attrs map[string]any) {
	res.Hide = boolean(attrs["hide"])
	if icon := str(attrs["icon"]); icon != "" {
		res.Icon = icon
	}
	if cost := int32(num(attrs["daily_cost"])); cost != 0 {
		res.DailyCost = cost
	}
	for _, item := range objects(attrs["item"]) {
		res.Metadata = append(res.Metadata, codersdk.WorkspaceResourceMetadata{
			Key: str(item["key"]), Value: str(item["value"]), Sensitive: boolean(item["sensitive"]),
		})
	}
}

// convertAgent reads a coder_agent and what belongs to it.
func convertAgent(a *tfjson.StateResource, attached []*tfjson.StateResource) (codersdk.ProvisionedAgent, error) {
	v := a.AttributeValues
	id := str(v["id"])
	agent := codersdk.ProvisionedAgent{
		ID: id, Name: instanceName(a), Token: str(v["token"]),
		OperatingSystem: str(v["os"]), Architecture: str(v["arch"]), Directory: str(v["dir"]),
		ConnectionTimeoutSeconds: int32(num(v["connection_timeout"])),
		TroubleshootingURL:       str(v["troubleshooting_url"]),
		MOTDFile:                 str(v["motd_file"]),
		Order:                    int32(num(v["order"])),
	}
	if s := str(v["startup_script"]); s != "" {
		agent.Scripts = append(agent.Scripts, codersdk.AgentScript{
			LogSourceID: id + "-startup", DisplayName: codersdk.ScriptStartupDisplayName, Script: s,
			RunOnStart: true, StartBlocksLogin: str(v["startup_script_behavior"]) == "blocking",
		})
	}
	if s := str(v["shutdown_script"]); s != "" {
		agent.Scripts = append(agent.Scripts, codersdk.AgentScript{
			LogSourceID: id + "-shutdown", DisplayName: codersdk.ScriptShutdownDisplayName, Script: s, RunOnStop: true,
		})
	}
	for _, m := range objects(v["metadata"]) {
		agent.Metadata = append(agent.Metadata, codersdk.AgentMetadataDescription{
			Key: str(m["key"]), DisplayName: str(m["display_name"]), Script: str(m["script"]),
			IntervalSeconds: int64(num(m["interval"])), TimeoutSeconds: int64(num(m["timeout"])), Order: int32(num(m["order"])),
		})
	}
	if apps := objects(v["display_apps"]); len(apps) > 0 {
		d := apps[0]
		agent.DisplayApps = &codersdk.DisplayApps{
			VSCode: boolean(d["vscode"]), VSCodeInsiders: boolean(d["vscode_insiders"]), WebTerminal: boolean(d["web_terminal"]),
			SSHHelper: boolean(d["ssh_helper"]), PortForwardingHelper: boolean(d["port_forwarding_helper"]),
		}
	}

	env, envFrom := map[string]string{}, map[string]*tfjson.StateResource{}
	for _, r := range attached {
		rv := r.AttributeValues
		switch r.Type {
		case "coder_app":
			agent.Apps = append(agent.Apps, convertApp(rv))
		case "coder_script":
			agent.Scripts = append(agent.Scripts, codersdk.AgentScript{
				LogSourceID: str(rv["id"]), DisplayName: str(rv["display_name"]), Icon: str(rv["icon"]),
				Script: str(rv["script"]), Cron: str(rv["cron"]), LogPath: str(rv["log_path"]),
				RunOnStart: boolean(rv["run_on_start"]), RunOnStop: boolean(rv["run_on_stop"]),
				StartBlocksLogin: boolean(rv["start_blocks_login"]), TimeoutSeconds: int32(num(rv["timeout"])),
			})
		case "coder_env":
			name, value, strategy := str(rv["name"]), str(rv["value"]), str(rv["merge_strategy"])
			prev, seen := envFrom[name]
			if !seen {
				env[name], envFrom[name] = value, r
				continue
			}
			if strategy == "error" || str(prev.AttributeValues["merge_strategy"]) == "error" {
				return agent, fmt.Errorf("%s and %s both set %s for agent %s, and merge_strategy \"error\" forbids that", prev.Address, r.Address, name, agent.Name)
			}
			switch strategy {
			case "append":
				env[name] += ":" + value
			case "prepend":
				env[name] = value + ":" + env[name]
			default:
				env[name] = value
			}
			envFrom[name] = r
		}
	}
	for k, val := range strMap(v["env"]) {
		env[k] = val
	}
	if len(env) > 0 {
		agent.Env = env
	}
	return agent, nil
}

func convertApp(v map[string]any) codersdk.ProvisionedApp {
	app := codersdk.ProvisionedApp{
		Slug: str(v["slug"]), DisplayName: str(v["display_name"]), URL: str(v["url"]), Command: str(v["command"]),
		Icon: str(v["icon"]), Subdomain: boolean(v["subdomain"]), Share: str(v["share"]), External: boolean(v["external"]),
		Group: str(v["group"]), Order: int32(num(v["order"])), Hidden: boolean(v["hidden"]), OpenIn: str(v["open_in"]),
		Tooltip: str(v["tooltip"]),
	}
	if hc := objects(v["healthcheck"]); len(hc) > 0 {
		app.Healthcheck = &codersdk.AppHealthcheck{
			URL: str(hc[0]["url"]), Interval: int32(num(hc[0]["interval"])), Threshold: int32(num(hc[0]["threshold"])),
		}
	}
	return app
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

func boolean(v any) bool {
	b, _ := v.(bool)
	return b
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

// objects reads a list (or set) of nested blocks.
func objects(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, item := range list {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
