-- Archived template versions (issue 35, as Coder's): left out of the
-- version list unless asked for, never promoted; the active version and
-- versions a workspace's latest build uses are never archived.
ALTER TABLE template_versions ADD COLUMN archived boolean NOT NULL DEFAULT false;
