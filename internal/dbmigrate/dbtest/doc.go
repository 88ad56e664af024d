// Package dbtest gives integration tests a database of their own on the test
// PostgreSQL (devtools/testenv): a fresh, uniquely named database,
// bootstrapped with the three standard roles (local-stack passwords) and
// migrated, dropped when the test ends. Roles are cluster-wide and shared by
// every test; databases are not.
package dbtest
