package fiba.peers;

import java.util.ArrayList;
import java.util.List;

/**
 * The command line both peers share (positional, given by bench.jvm_peers):
 * {@code BOOTSTRAP WARMUP_TOPIC WARMUP_EVENTS WARMUP_WINDOW_MS INPUT_TOPIC EVENTS GRACE_MS
 * RUN...}, each RUN {@code OCCUPANCY:WINDOW_MS:PREFILL_TOPIC:PREFILL_EVENTS:OUTPUT_TOPIC[:VARIANT]}: first one
 * warm-up job on WARMUP_TOPIC (WARMUP_EVENTS records, window WARMUP_WINDOW_MS, not measured
 * beyond its own line), then one measured job per RUN on INPUT_TOPIC (EVENTS records), its
 * state first filled from PREFILL_TOPIC (PREFILL_EVENTS records), writing to OUTPUT_TOPIC.
 */
record Args(
        String bootstrap,
        String warmupTopic,
        long warmupEvents,
        long warmupWindowMs,
        String inputTopic,
        long events,
        long graceMs,
        List<Run> runs) {

    record Run(
            int occupancy, long windowMs, String prefillTopic, long prefillEvents, String outputTopic, String variant) {}

    static Args parse(String[] argv) {
        if (argv.length < 8) {
            throw new IllegalArgumentException(
                    "usage: BOOTSTRAP WARMUP_TOPIC WARMUP_EVENTS WARMUP_WINDOW_MS INPUT_TOPIC EVENTS"
                            + " GRACE_MS OCCUPANCY:WINDOW_MS:PREFILL_TOPIC:PREFILL_EVENTS:OUTPUT_TOPIC[:VARIANT]...");
        }
        List<Run> runs = new ArrayList<>();
        for (int i = 7; i < argv.length; i++) {
            String[] p = argv[i].split(":");
            runs.add(new Run(
                    Integer.parseInt(p[0]),
                    Long.parseLong(p[1]),
                    p[2],
                    Long.parseLong(p[3]),
                    p[4],
                    p.length > 5 ? p[5] : ""));
        }
        return new Args(
                argv[0],
                argv[1],
                Long.parseLong(argv[2]),
                Long.parseLong(argv[3]),
                argv[4],
                Long.parseLong(argv[5]),
                Long.parseLong(argv[6]),
                runs);
    }
}
