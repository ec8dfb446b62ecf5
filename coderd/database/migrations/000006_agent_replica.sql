-- The coderd replica an agent's relay connection is on, so that a user's
-- connection that reaches another replica is relayed to that one. NULL
-- while the agent is not connected. Not a foreign key: replica rows come
-- and go with heartbeats, the agent's connection is what counts.
ALTER TABLE workspace_agents ADD COLUMN connected_replica_id uuid;
