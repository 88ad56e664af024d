-- 00008_stream_progress: how far the stream evaluator has stored its results, per topic partition.
-- pg_rule_hits raises it in the same transaction as the batch's hits and alerts, so a record at or
-- below it has been evaluated and its hits stored. A record read again (a group reset or renamed
-- inside the replay window, which leaves the running totals as they are now, later events
-- included) is then left alone instead of being evaluated against totals it never had.
-- Not workspace data: only the stream's role (speculapro_system) uses it.
CREATE TABLE speculapro.stream_progress (
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    stored_offset   bigint      NOT NULL,   -- the highest offset whose results are stored
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, kafka_partition)
);
REVOKE ALL ON speculapro.stream_progress FROM speculapro_app;
