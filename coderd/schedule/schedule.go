// Package schedule parses workspace autostart schedules: Coder's weekly
// cron lines, "CRON_TZ=Europe/Berlin 30 9 * * 1-5" (minute, hour,
// day-of-month and month always "*", day of week), and the short form the
// CLI takes, "09:00 Mon-Fri Europe/Berlin". It computes occurrences in the
// schedule's time zone (so 09:00 stays 09:00 across daylight saving
// changes). It holds no state and runs nothing: coderd's lifecycle
// scheduler decides when to act.
package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("schedule: invalid")

// Schedule is a parsed weekly schedule.
type Schedule struct {
	spec *cron.SpecSchedule
	// cronLine is the canonical form, with CRON_TZ.
	cronLine string
	minute   string
	hour     string
	dow      string
}

var fieldParsers = map[string]cron.Parser{
	"minute":      cron.NewParser(cron.Minute),
	"hour":        cron.NewParser(cron.Hour),
	"day-of-week": cron.NewParser(cron.Dow),
}

func invalid(raw, format string, args ...any) error {
	return fmt.Errorf("%w schedule %q: %s", ErrInvalid, raw, fmt.Sprintf(format, args...))
}

// Weekly parses a Coder weekly cron line: an optional "CRON_TZ=<IANA zone>"
// (UTC when absent), then five fields of which day-of-month and month must
// be "*". Errors name the field that is wrong.
func Weekly(raw string) (*Schedule, error) {
	fields := strings.Fields(raw)
	loc := time.UTC
	if len(fields) > 0 && strings.HasPrefix(fields[0], "CRON_TZ=") {
		name := strings.TrimPrefix(fields[0], "CRON_TZ=")
		l, err := loadLocation(name)
		if err != nil {
			return nil, invalid(raw, "%v", err)
		}
		loc = l
		fields = fields[1:]
	}
	if len(fields) != 5 {
		return nil, invalid(raw, "want 5 fields (minute hour day-of-month month day-of-week), got %d", len(fields))
	}
	if fields[2] != "*" {
		return nil, invalid(raw, "day-of-month must be *, got %q (schedules are weekly)", fields[2])
	}
	if fields[3] != "*" {
		return nil, invalid(raw, "month must be *, got %q (schedules are weekly)", fields[3])
	}
	for name, v := range map[string]string{"minute": fields[0], "hour": fields[1], "day-of-week": fields[4]} {
		if _, err := fieldParsers[name].Parse(v); err != nil {
			return nil, invalid(raw, "%s %q: %v", name, v, err)
		}
	}
	line := fmt.Sprintf("CRON_TZ=%s %s", loc.String(), strings.Join(fields, " "))
	parsed, err := cron.ParseStandard(line)
	if err != nil {
		return nil, invalid(raw, "%v", err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, invalid(raw, "not a weekly schedule")
	}
	return &Schedule{spec: spec, cronLine: line, minute: fields[0], hour: fields[1], dow: fields[4]}, nil
}

func loadLocation(name string) (*time.Location, error) {
	if name == "" {
		return nil, errors.New("empty time zone")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q (want an IANA name such as Europe/Berlin)", name)
	}
	return loc, nil
}

var clockRe = regexp.MustCompile(`^(\d{1,2}):(\d{2})\s*([AaPp][Mm])?$`)

// Short parses the CLI's form: a time of day ("09:00", "9:30AM"), then
// optionally days of the week ("Mon-Fri", "Mon,Wed", "*"; every day when
// absent) and an IANA time zone (zone, or UTC when both are absent).
// Coder's `coder schedule start` takes the same.
func Short(s, zone string) (*Schedule, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > 3 {
		return nil, invalid(s, `want "HH:MM [days] [time zone]", e.g. "09:00 Mon-Fri Europe/Berlin"`)
	}
	m := clockRe.FindStringSubmatch(fields[0])
	if m == nil {
		return nil, invalid(s, "time of day %q: want HH:MM (24-hour) or H:MMAM/PM", fields[0])
	}
	hour, _ := strconv.Atoi(m[1])
	minute, _ := strconv.Atoi(m[2])
	if m[3] != "" {
		if hour < 1 || hour > 12 {
			return nil, invalid(s, "time of day %q: hour must be 1-12 with AM/PM", fields[0])
		}
		hour %= 12
		if strings.EqualFold(m[3], "pm") {
			hour += 12
		}
	}
	if hour > 23 || minute > 59 {
		return nil, invalid(s, "time of day %q: want 00:00 to 23:59", fields[0])
	}
	days := "*"
	rest := fields[1:]
	if _, err := fieldParsers["day-of-week"].Parse(firstOr(rest)); len(rest) > 0 && err == nil {
		days = rest[0]
		rest = rest[1:]
	}
	if len(rest) > 0 {
		if zone != "" && zone != rest[0] {
			return nil, invalid(s, "two time zones: %q and %q", rest[0], zone)
		}
		zone = rest[0]
	}
	if zone == "" {
		zone = "UTC"
	}
	return Weekly(fmt.Sprintf("CRON_TZ=%s %d %d * * %s", zone, minute, hour, days))
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// String is the canonical cron line, with its CRON_TZ.
func (s *Schedule) String() string { return s.cronLine }

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.spec.Location }

// Next is the first occurrence strictly after t.
func (s *Schedule) Next(t time.Time) time.Time { return s.spec.Next(t) }

// Due reports whether an occurrence falls in (after, now].
func (s *Schedule) Due(after, now time.Time) bool {
	next := s.Next(after)
	return !next.IsZero() && !next.After(now)
}

// Human is the schedule as people read it: "09:00 Mon-Fri (Europe/Berlin)"
// for single times; the cron fields otherwise.
func (s *Schedule) Human() string {
	days := s.dow
	if days == "*" {
		days = "daily"
	}
	h, herr := strconv.Atoi(s.hour)
	m, merr := strconv.Atoi(s.minute)
	if herr != nil || merr != nil {
		return fmt.Sprintf("cron %q %s (%s)", s.minute+" "+s.hour, days, s.Location())
	}
	return fmt.Sprintf("%02d:%02d %s (%s)", h, m, days, s.Location())
}
