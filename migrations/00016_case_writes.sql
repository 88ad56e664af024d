-- 00016_case_writes: the stream writes every alert into its case; this keeps what that costs to the
-- rows and index entries a case needs.

-- alerts.case_id and case_events.case_id name a case that the same statement has just inserted or
-- updated and holds locked until the commit: the stream takes the id from its INSERT … ON CONFLICT
-- on cases (RETURNING), the case API from its UPDATE of the case (RETURNING), and nothing deletes
-- a case. The foreign keys checked that again row by row, a query and a lock on the case for each
-- alert and each case event, guaranteeing nothing the writers do not already give.
ALTER TABLE speculapro.alerts DROP CONSTRAINT alerts_case_id_fkey;
ALTER TABLE speculapro.case_events DROP CONSTRAINT case_events_case_id_fkey;

-- Every alert that joins an open case rewrites the case's row (priority, version, updated_at, no
-- indexed column). With 80 % fill a page has room for the new versions of about a fifth of its
-- rows in one batch; the rest moved to other pages, each with a new entry in all five indexes of
-- cases. Half-full pages keep a batch's rewrites on their page (HOT), with no new index entry. It
-- applies to the pages written from now on.
ALTER TABLE speculapro.cases SET (fillfactor = 50);
