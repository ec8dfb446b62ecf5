-- A template's maximum TTL (issue 35; Coder's max_ttl, in milliseconds, 0
-- means none): no workspace of the template may ask for a longer TTL, and
-- no start build runs longer than it after it started, activity or not.
--
-- max_deadline is the latest moment a start build may run to (its end plus
-- the template's max_ttl_ms when it finished); its deadline never passes
-- it. The zero time means none, as with deadline (000014).
ALTER TABLE templates
    ADD COLUMN max_ttl_ms bigint NOT NULL DEFAULT 0 CHECK (max_ttl_ms >= 0);

ALTER TABLE workspace_builds
    ADD COLUMN max_deadline timestamptz NOT NULL DEFAULT '0001-01-01 00:00:00+00';
