package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"airgapcoder/coderd/parameters"
	"airgapcoder/codersdk"
)

// parameter asks for p's value: its display name, description and options
// (a numbered list), then a question with the default in brackets. An empty
// answer takes the default when there is one. An answer that breaks p's
// rules is explained and asked again. previous is the workspace's current
// value (nil on create), for monotonic parameters.
func (pr *prompter) parameter(p codersdk.TemplateVersionParameter, def string, hasDefault bool, previous *string) (string, error) {
	label := p.Name
	if p.DisplayName != "" && p.DisplayName != p.Name {
		label = fmt.Sprintf("%s (%s)", p.DisplayName, p.Name)
	}
	if p.Ephemeral {
		label += " (build option)"
	}
	fmt.Fprintln(pr.out, label)
	if d := strings.TrimSpace(p.Description); d != "" {
		for _, line := range strings.Split(d, "\n") {
			fmt.Fprintf(pr.out, "  %s\n", strings.TrimRight(line, " \t\r"))
		}
	}
	for i, o := range p.Options {
		line := fmt.Sprintf("  %d) %s", i+1, o.Name)
		if o.Value != o.Name {
			line += fmt.Sprintf(" (%s)", o.Value)
		}
		if o.Description != "" {
			line += " - " + o.Description
		}
		fmt.Fprintln(pr.out, line)
	}
	question := parameterQuestion(p)
	switch {
	case hasDefault && def != "" && def != "[]":
		question += fmt.Sprintf(" [%s]", displayValue(p, def))
	case hasDefault:
		question += " (optional)"
	}
	for {
		fmt.Fprintf(pr.out, "%s: ", question)
		line, err := pr.readLine()
		if err != nil {
			return "", fmt.Errorf("read a value for parameter %q: %w", p.Name, err)
		}
		line = strings.TrimSpace(line)
		if line == "" {
			if hasDefault {
				return def, nil
			}
			fmt.Fprintln(pr.out, "  a value is required")
			continue
		}
		v, err := interpretAnswer(p, line)
		if err == nil {
			err = validateParameterValue(p, v, previous)
		}
		if err == nil {
			return v, nil
		}
		fmt.Fprintf(pr.out, "  %v\n", err)
	}
}

// parameterQuestion is the question for p, without its default.
func parameterQuestion(p codersdk.TemplateVersionParameter) string {
	n := len(p.Options)
	switch {
	case p.Type == codersdk.ParameterTypeListString && n > 0:
		return fmt.Sprintf("Choose any of 1-%d, separated by commas", n)
	case p.Type == codersdk.ParameterTypeListString:
		return "Enter values separated by commas (or a JSON list)"
	case n > 0:
		return fmt.Sprintf("Choose 1-%d", n)
	case p.Type == codersdk.ParameterTypeBool:
		return "Enter true or false"
	case p.Type == codersdk.ParameterTypeNumber:
		q := "Enter a number"
		switch min, max := p.ValidationMin, p.ValidationMax; {
		case min != nil && max != nil:
			q += fmt.Sprintf(" from %d to %d", *min, *max)
		case min != nil:
			q += fmt.Sprintf(" of at least %d", *min)
		case max != nil:
			q += fmt.Sprintf(" of at most %d", *max)
		}
		return q
	}
	return "Enter a value"
}

// displayValue shows a value as a person picks it: an option by its name,
// a list as its items.
func displayValue(p codersdk.TemplateVersionParameter, v string) string {
	values := []string{v}
	if p.Type == codersdk.ParameterTypeListString {
		if err := json.Unmarshal([]byte(v), &values); err != nil {
			return v
		}
	}
	for i, item := range values {
		for _, o := range p.Options {
			if o.Value == item {
				values[i] = o.Name
			}
		}
	}
	return strings.Join(values, ", ")
}

// interpretAnswer turns what a person typed into p's value: an option's
// number or name into its value, yes/no into true/false, a comma-separated
// list into a JSON list.
func interpretAnswer(p codersdk.TemplateVersionParameter, answer string) (string, error) {
	switch p.Type {
	case codersdk.ParameterTypeListString:
		var items []string
		if strings.HasPrefix(answer, "[") {
			if err := json.Unmarshal([]byte(answer), &items); err != nil {
				return "", fmt.Errorf("%s is not a JSON list of strings", answer)
			}
		} else {
			for _, item := range strings.Split(answer, ",") {
				if item = strings.TrimSpace(item); item != "" {
					items = append(items, item)
				}
			}
		}
		if len(p.Options) > 0 {
			for i, item := range items {
				v, err := pickOption(p, item)
				if err != nil {
					return "", err
				}
				items[i] = v
			}
		}
		if items == nil {
			items = []string{}
		}
		b, _ := json.Marshal(items)
		return string(b), nil
	case codersdk.ParameterTypeBool:
		switch strings.ToLower(answer) {
		case "true", "yes", "y":
			return "true", nil
		case "false", "no", "n":
			return "false", nil
		}
		return "", fmt.Errorf("%q is not true or false", answer)
	}
	if len(p.Options) > 0 {
		return pickOption(p, answer)
	}
	return answer, nil
}

// pickOption returns the value of the option an answer names: by number,
// by value, or by name (in any case).
func pickOption(p codersdk.TemplateVersionParameter, answer string) (string, error) {
	if n, err := strconv.Atoi(answer); err == nil && n >= 1 && n <= len(p.Options) {
		return p.Options[n-1].Value, nil
	}
	for _, o := range p.Options {
		if o.Value == answer {
			return o.Value, nil
		}
	}
	for _, o := range p.Options {
		if strings.EqualFold(o.Name, answer) {
			return o.Value, nil
		}
	}
	return "", fmt.Errorf("%q is not one of the choices: enter a number from 1 to %d", answer, len(p.Options))
}

// validateParameterValue checks a typed-in value against p's rules with
// coderd's own check (coderd/parameters.Validate, the provider's rules and
// words), so that a person can correct it at once.
func validateParameterValue(p codersdk.TemplateVersionParameter, v string, previous *string) error {
	if err := parameters.Validate(p, v, previous); err != nil {
		return errors.New(err.Detail)
	}
	return nil
}
