// Package rulestats owns rule analytics: per rule and version of a
// workspace, since a time, how many events it was evaluated on, how often it
// fired (and at what rate per 1,000 events), the alerts and distinct
// accounts behind those hits, its mode, its first and last hit, and, when
// alerts have outcomes (their cases closed with a disposition), its
// precision. It only reads, as the workspace under row-level security, and
// writes the figures as a table, JSON or CSV.
package rulestats
