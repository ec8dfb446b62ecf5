package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"airgapcoder/coderd/schedule"
)

func TestWeekly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw     string
		want    string // canonical form
		wantErr string // substring of the error
	}{
		{raw: "CRON_TZ=Europe/Berlin 30 9 * * 1-5", want: "CRON_TZ=Europe/Berlin 30 9 * * 1-5"},
		{raw: "0 9 * * Mon-Fri", want: "CRON_TZ=UTC 0 9 * * Mon-Fri"},
		{raw: "  CRON_TZ=America/New_York   15 8  * *  *  ", want: "CRON_TZ=America/New_York 15 8 * * *"},
		{raw: "0,30 8-10 * * Sat,Sun", want: "CRON_TZ=UTC 0,30 8-10 * * Sat,Sun"},
		{raw: "", wantErr: "want 5 fields"},
		{raw: "0 9 * *", wantErr: "want 5 fields (minute hour day-of-month month day-of-week), got 4"},
		{raw: "0 0 9 * * *", wantErr: "got 6"},
		{raw: "61 9 * * *", wantErr: `minute "61"`},
		{raw: "0 24 * * *", wantErr: `hour "24"`},
		{raw: "0 9 * * Funday", wantErr: `day-of-week "Funday"`},
		{raw: "0 9 1 * *", wantErr: "day-of-month must be *"},
		{raw: "0 9 * 6 *", wantErr: "month must be *"},
		{raw: "CRON_TZ=Mars/Olympus 0 9 * * *", wantErr: `unknown time zone "Mars/Olympus"`},
		{raw: "CRON_TZ= 0 9 * * *", wantErr: "empty time zone"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			t.Parallel()
			s, err := schedule.Weekly(tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, schedule.ErrInvalid) {
					t.Fatalf("Weekly(%q): got %v, want an ErrInvalid saying %q", tc.raw, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Weekly(%q): %v", tc.raw, err)
			}
			if got := s.String(); got != tc.want {
				t.Errorf("Weekly(%q).String(): got %q, want %q", tc.raw, got, tc.want)
			}
		})
	}
}

func TestShort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, zone string
		want     string
		human    string
		wantErr  string
	}{
		{in: "09:00 Mon-Fri Europe/Berlin", want: "CRON_TZ=Europe/Berlin 0 9 * * Mon-Fri", human: "09:00 Mon-Fri (Europe/Berlin)"},
		{in: "09:00 Mon-Fri", zone: "Europe/Berlin", want: "CRON_TZ=Europe/Berlin 0 9 * * Mon-Fri"},
		{in: "9:30AM", want: "CRON_TZ=UTC 30 9 * * *", human: "09:30 daily (UTC)"},
		{in: "12:15AM Sun", want: "CRON_TZ=UTC 15 0 * * Sun"},
		{in: "12:00pm Sat,Sun Asia/Tokyo", want: "CRON_TZ=Asia/Tokyo 0 12 * * Sat,Sun"},
		{in: "17:45 America/New_York", want: "CRON_TZ=America/New_York 45 17 * * *"},
		{in: "", wantErr: `want "HH:MM [days] [time zone]"`},
		{in: "9am", wantErr: `time of day "9am"`},
		{in: "24:00", wantErr: "want 00:00 to 23:59"},
		{in: "13:00PM", wantErr: "hour must be 1-12 with AM/PM"},
		{in: "09:00 Mon-Fri Europe/Atlantis", wantErr: `unknown time zone "Europe/Atlantis"`},
		{in: "09:00 Europe/Berlin", zone: "Asia/Tokyo", wantErr: "two time zones"},
		{in: "09:00 Mon Europe/Berlin extra", wantErr: `want "HH:MM [days] [time zone]"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			s, err := schedule.Short(tc.in, tc.zone)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Short(%q, %q): got %v, want an error saying %q", tc.in, tc.zone, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Short(%q, %q): %v", tc.in, tc.zone, err)
			}
			if s.String() != tc.want {
				t.Errorf("Short(%q, %q): got %q, want %q", tc.in, tc.zone, s, tc.want)
			}
			if tc.human != "" && s.Human() != tc.human {
				t.Errorf("Human(): got %q, want %q", s.Human(), tc.human)
			}
		})
	}
}

// TestNextTimeZones: occurrences are wall-clock times in the schedule's
// zone, through daylight saving changes (Europe/Berlin: summer time from
// 2026-03-29 02:00 to 2026-10-25 03:00).
func TestNextTimeZones(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name, sched, after, want string
	}{
		{"winter: 09:00 Berlin is 08:00 UTC", "CRON_TZ=Europe/Berlin 0 9 * * *", "2026-01-15T10:00:00Z", "2026-01-16T08:00:00Z"},
		{"summer: 09:00 Berlin is 07:00 UTC", "CRON_TZ=Europe/Berlin 0 9 * * *", "2026-07-15T10:00:00Z", "2026-07-16T07:00:00Z"},
		{"across spring forward", "CRON_TZ=Europe/Berlin 0 9 * * *", "2026-03-28T08:30:00Z", "2026-03-29T07:00:00Z"},
		{"across fall back", "CRON_TZ=Europe/Berlin 0 9 * * *", "2026-10-24T07:30:00Z", "2026-10-25T08:00:00Z"},
		{"a time skipped by spring forward does not occur that day", "CRON_TZ=Europe/Berlin 30 2 * * *", "2026-03-28T12:00:00Z", "2026-03-30T00:30:00Z"},
		{"a time repeated by fall back occurs at its first", "CRON_TZ=Europe/Berlin 30 2 * * *", "2026-10-24T12:00:00Z", "2026-10-25T00:30:00Z"},
		{"weekdays: Friday evening to Monday", "CRON_TZ=America/New_York 0 9 * * Mon-Fri", "2026-11-27T23:00:00Z", "2026-11-30T14:00:00Z"},
		{"the day of week is the zone's, not UTC's", "CRON_TZ=Pacific/Auckland 0 8 * * Mon", "2026-11-27T00:00:00Z", "2026-11-29T19:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := schedule.Weekly(tc.sched)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Next(utc(tc.after)); !got.Equal(utc(tc.want)) {
				t.Errorf("Next(%s) of %q: got %s, want %s", tc.after, tc.sched, got.UTC(), tc.want)
			}
		})
	}
}

func TestDue(t *testing.T) {
	t.Parallel()
	s, err := schedule.Weekly("CRON_TZ=UTC 0 9 * * *")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		after, now time.Time
		want       bool
	}{
		{"occurrence inside the window", at.Add(-time.Minute), at.Add(time.Second), true},
		{"occurrence exactly at now", at.Add(-time.Minute), at, true},
		{"window ends before it", at.Add(-time.Minute), at.Add(-time.Second), false},
		{"window starts at it (already handled)", at, at.Add(time.Minute), false},
	} {
		if got := s.Due(tc.after, tc.now); got != tc.want {
			t.Errorf("%s: Due(%s, %s) = %v, want %v", tc.name, tc.after, tc.now, got, tc.want)
		}
	}
}
