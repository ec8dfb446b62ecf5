-- coderd replicas sharing this database. Each replica inserts its row at
-- start, refreshes updated_at (the database's clock, so replicas on hosts
-- with skewed clocks agree) every heartbeat, and deletes it on a clean
-- shutdown. A replica whose heartbeat stopped drops out of every listing;
-- its row is deleted by the others after an hour.

CREATE TABLE replicas (
    id            uuid PRIMARY KEY,
    hostname      text NOT NULL,
    -- The address other replicas reach this one at (its own listener, not
    -- the load balancer's access URL).
    relay_address text NOT NULL,
    version       text NOT NULL,
    started_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

CREATE INDEX replicas_updated_at ON replicas (updated_at);
