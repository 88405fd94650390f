-- hookrelay: runs beside older releases
-- 0019: callback headers. A task may carry headers that every attempt of its
-- webhook sends (a receiver's static x-api-key). Their values are sealed like
-- signing secrets (AES-GCM under the master key, the task id as associated
-- data) in callback_headers_enc; their names, which the task resource shows,
-- in callback_header_names. Both NULL for a task without any. Two nullable
-- columns older code neither reads nor writes: an older dispatcher still
-- running during an upgrade sends that task's webhook without them.
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS callback_headers_enc bytea;
ALTER TABLE tasks ADD COLUMN IF NOT EXISTS callback_header_names text[];
