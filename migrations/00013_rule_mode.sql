-- 00013_rule_mode: a rule's live or shadow mode.
SELECT 1;
