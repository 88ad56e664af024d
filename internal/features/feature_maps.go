package features

// The feature maps (doc.go; the names rule authors write). Each section is
// first taken as values (txnFeat, evFeat, the counterparty's totals), which
// a snapshot keeps (snapshot.go), then built into its map by one function,
// for a first application and a replay alike.

func (st *state) txnFeat(f *txnFeat, cur string, newcp bool, ssp int64) {
	f.w, f.newcp, f.ssp = st.windows(cur), newcp, ssp
}

// txnField says which figure of a txnFeat a transaction feature is: what
// (the fields below) and, for the windowed ones, which window.
type txnField struct {
	what byte
	w    int
}

// What a transaction feature is.
const (
	tfOutCount = iota
	tfInCount
	tfOutSum
	tfInSum
	tfPayees
	tfSenders
	tfNewCP
	tfSince
)

// txnFields names every transaction feature (doc.go), txnNames lists them:
// the counts and sums of each window, the distinct counts of 24h and 30d,
// new_counterparty and seconds_since_previous.
var txnFields, txnNames = func() (map[string]txnField, []string) {
	m := map[string]txnField{}
	var names []string
	add := func(name string, f txnField) { m[name] = f; names = append(names, name) }
	windows := []string{"1h", "24h", "7d", "30d"}
	for _, k := range []struct {
		prefix string
		what   byte
	}{{"out_count_", tfOutCount}, {"in_count_", tfInCount}, {"out_sum_", tfOutSum}, {"in_sum_", tfInSum}} {
		for w, suffix := range windows {
			add(k.prefix+suffix, txnField{k.what, w})
		}
	}
	for _, w := range []int{1, 3} {
		add("distinct_payees_"+windows[w], txnField{tfPayees, w})
		add("distinct_senders_"+windows[w], txnField{tfSenders, w})
	}
	add("new_counterparty", txnField{what: tfNewCP})
	add("seconds_since_previous", txnField{what: tfSince})
	return m, names
}()

// txnGet is one feature of a transaction section (txnMap builds the map
// from it).
func txnGet(f *txnFeat, name string) (any, bool) {
	x, ok := txnFields[name]
	if !ok {
		return nil, false
	}
	w := &f.w[x.w]
	switch x.what {
	case tfOutCount:
		return w.oc, true
	case tfInCount:
		return w.ic, true
	case tfOutSum:
		return w.os.number(), true
	case tfInSum:
		return w.is.number(), true
	case tfPayees:
		return w.dp, true
	case tfSenders:
		return w.ds, true
	case tfNewCP:
		return f.newcp, true
	}
	return f.ssp, true
}

func txnMap(m map[string]any, f *txnFeat) {
	for _, k := range txnNames {
		m[k], _ = txnGet(f, k)
	}
}

func (st *state) putTransaction(m map[string]any, cur string, newcp bool, ssp int64) {
	var f txnFeat
	st.txnFeat(&f, cur, newcp, ssp)
	txnMap(m, &f)
}

// evFeat takes the account-event features, seconds measured to ref.
func (st *state) evFeat(f *evFeat, ref int64) {
	f.ev = st.eventCounts()
	f.sim, f.prof = st.since(st.ls[0], ref), st.since(st.ls[1], ref)
}

var evNames = []string{"events_1h", "events_24h", "events_7d", "seconds_since_sim_swap", "seconds_since_profile_change"}

// evGet is one account-event feature (evMap builds the map from it).
func evGet(f *evFeat, name string) (any, bool) {
	switch name {
	case "events_1h":
		return f.ev[0], true
	case "events_24h":
		return f.ev[1], true
	case "events_7d":
		return f.ev[2], true
	case "seconds_since_sim_swap":
		return f.sim, true
	case "seconds_since_profile_change":
		return f.prof, true
	}
	return nil, false
}

func evMap(m map[string]any, f *evFeat) {
	for _, k := range evNames {
		m[k], _ = evGet(f, k)
	}
}

// putEvents adds the account-event features, seconds measured to ref.
func (st *state) putEvents(m map[string]any, ref int64) {
	var f evFeat
	st.evFeat(&f, ref)
	evMap(m, &f)
}

var cpNames = []string{"paid_count_24h", "paid_count_30d", "paid_sum_24h", "paid_sum_30d", "distinct_payers_24h", "distinct_payers_30d"}

// cpGet is one counterparty feature (cpMap builds the map from it).
func cpGet(w *[4]totals, name string) (any, bool) {
	switch name {
	case "paid_count_24h":
		return w[1].oc, true
	case "paid_count_30d":
		return w[3].oc, true
	case "paid_sum_24h":
		return w[1].os.number(), true
	case "paid_sum_30d":
		return w[3].os.number(), true
	case "distinct_payers_24h":
		return w[1].dp, true
	case "distinct_payers_30d":
		return w[3].dp, true
	}
	return nil, false
}

func cpMap(m map[string]any, w *[4]totals) {
	for _, k := range cpNames {
		m[k], _ = cpGet(w, k)
	}
}

func (st *state) putCounterparty(m map[string]any, cur string) {
	w := st.windows(cur)
	cpMap(m, &w)
}
