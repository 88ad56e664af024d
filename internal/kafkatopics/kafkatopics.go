package kafkatopics

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/speculapro/speculapro/internal/config"
)

// DLQSuffix turns a topic's name into its dead-letter twin's.
const DLQSuffix = ".dlq"

// topics are the eight topic names without prefix, in the order
// docs/kafka.md lists them.
var topics = []string{
	"txn.ingested",
	"account.events",
	"txn.decided",
	"entity.updated",
	"rule.hit",
	"alert.created",
	"case.events",
	"notify.requests",
}

// Errors of reading the topic settings.
var (
	// ErrBadSetting is returned, wrapped with the setting, when
	// SP_KAFKA_PARTITIONS or SP_KAFKA_REPLICATION_FACTOR is out of range.
	ErrBadSetting = errors.New("invalid topic setting")
)

// Names returns the 16 topic names with prefix: each topic followed by its
// .dlq twin.
func Names(prefix string) []string {
	out := make([]string, 0, 2*len(topics))
	for _, t := range topics {
		out = append(out, prefix+t, prefix+t+DLQSuffix)
	}
	return out
}

// Spec says how topics are created.
type Spec struct {
	Prefix            string
	Partitions        int32
	ReplicationFactor int16 // -1: the broker's default
}

// SpecFromEnv reads SP_KAFKA_TOPIC_PREFIX, SP_KAFKA_PARTITIONS and
// SP_KAFKA_REPLICATION_FACTOR.
func SpecFromEnv() (Spec, error) {
	parts, err := strconv.ParseInt(config.KafkaPartitions.Value(), 10, 32)
	if err != nil || parts < 1 {
		return Spec{}, fmt.Errorf("%s=%q: want a whole number of at least 1: %w", config.KafkaPartitions.Name, config.KafkaPartitions.Value(), ErrBadSetting)
	}
	rf, err := strconv.ParseInt(config.KafkaReplicationFactor.Value(), 10, 16)
	if err != nil || rf == 0 || rf < -1 {
		return Spec{}, fmt.Errorf("%s=%q: want -1 (the broker's default) or a whole number of at least 1: %w", config.KafkaReplicationFactor.Name, config.KafkaReplicationFactor.Value(), ErrBadSetting)
	}
	return Spec{Prefix: config.KafkaTopicPrefix.Value(), Partitions: int32(parts), ReplicationFactor: int16(rf)}, nil
}

// Refusal is a topic the broker would not create, with its reason.
type Refusal struct {
	Topic  string
	Reason string
}

// Result says what Ensure did with each of the 16 topics. Each list is in
// Names order.
type Result struct {
	Created  []string
	Existing []string
	Refused  []Refusal
}

// Ensure creates every topic of spec that does not exist yet. Existing
// topics are left completely untouched: neither their partitions nor their
// configuration change. A topic the broker refuses (a partition limit, a
// policy, a missing permission) does not stop the others; it is reported in
// Result.Refused. The error is only for failing to talk to the broker at all.
func Ensure(ctx context.Context, adm *kadm.Client, spec Spec) (Result, error) {
	names := Names(spec.Prefix)
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return Result{}, fmt.Errorf("listing topics %s*: %w", spec.Prefix, err)
	}
	existing := make(map[string]bool, len(names))
	var missing []string
	for _, n := range names {
		d, ok := details[n]
		switch {
		case ok && d.Err == nil:
			existing[n] = true
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, n)
		default:
			// Not knowing whether it exists (e.g. no DESCRIBE permission),
			// trying to create it is the only way to find out; the broker
			// answers TOPIC_ALREADY_EXISTS when it does.
			missing = append(missing, n)
		}
	}

	created := make(map[string]bool)
	refused := make(map[string]string)
	if len(missing) > 0 {
		resps, err := adm.CreateTopics(ctx, spec.Partitions, spec.ReplicationFactor, nil, missing...)
		if err != nil {
			return Result{}, fmt.Errorf("creating %d topics: %w", len(missing), err)
		}
		for _, n := range missing {
			r, ok := resps[n]
			switch {
			case !ok:
				refused[n] = "the broker did not answer for this topic"
			case r.Err == nil:
				created[n] = true
			case errors.Is(r.Err, kerr.TopicAlreadyExists):
				// Created by someone else between listing and creating.
				existing[n] = true
			default:
				reason := r.Err.Error()
				if r.ErrMessage != "" {
					reason += ": " + r.ErrMessage
				}
				refused[n] = reason
			}
		}
	}

	var res Result
	for _, n := range names {
		switch {
		case created[n]:
			res.Created = append(res.Created, n)
		case existing[n]:
			res.Existing = append(res.Existing, n)
		default:
			res.Refused = append(res.Refused, Refusal{Topic: n, Reason: refused[n]})
		}
	}
	return res, nil
}
