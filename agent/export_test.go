package agent

// CountLines returns how many of lines are exactly s: how often a script
// printed a line, for the script tests of this package and of agent_test.
func CountLines(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if l == s {
			n++
		}
	}
	return n
}
