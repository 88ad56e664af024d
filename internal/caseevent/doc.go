// Package caseevent owns the one shape of a case event as webhook endpoints
// receive it, whoever wrote the event: the stream (case.opened,
// case.alert_attached, in plugins/pgrulehits) and the case API
// (case.assigned, case.commented, case.status_changed, case.closed,
// case.reopened, in plugins/caseapi). Both build the body in SQL, in the
// statement that appends the case event and queues its deliveries, with
// BodyKeys and the case object of CaseSQL, so a receiver reads every case.*
// body with one decoder.
package caseevent
