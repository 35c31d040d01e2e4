package fiba.peers;

import java.util.Locale;
import java.util.UUID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * Flink SQL's OVER window on the benchmark's input: per input row,
 * {@code COUNT(*), SUM(value), MAX(value) OVER (PARTITION BY k ORDER BY rt RANGE BETWEEN
 * INTERVAL window PRECEDING AND CURRENT ROW)}, the rows of the same key with event time in
 * [t - window, t] (rows of equal time see each other), to the output topic as
 * {@code {"ts", "cnt", "sm", "mx"}} keyed by the input key. Event time from the value's
 * {@code ts}, watermark {@code ts - grace} per Kafka partition (rows behind it are late and
 * dropped: none in this input); progress is counted as the window emits the input's rows
 * ({@link Seen}). Flink's Kafka connector both ways (bounded source: up to the
 * latest offsets at the start), JSON format, local MiniCluster, parallelism 1, the default
 * (heap) state backend, no checkpoints. Each run is a new job on the same JVM (see
 * {@link Args}); its prefill topic is read as a second source, UNION ALL with the input: the
 * watermark is the lower of the two, so the OVER window takes the prefill's older rows first.
 */
public final class FlinkOverRange {
    private FlinkOverRange() {}

    public static void main(String[] argv) throws Exception {
        Args args = Args.parse(argv);
        Args.Run first = args.runs().get(0);
        Args.Run warmup = new Args.Run(
                0, args.warmupWindowMs(), "", 0, first.outputTopic() + "-warmup", first.variant());
        run(args, warmup, args.warmupTopic(), args.warmupEvents(), "warmup");
        for (Args.Run run : args.runs()) {
            run(args, run, args.inputTopic(), args.events(), "measured");
        }
    }

    static void run(Args args, Args.Run run, String input, long events, String phase)
            throws Exception {
        Progress progress = new Progress(events);
        Seen.current = progress;
        Configuration config = new Configuration();
        config.setString("parallelism.default", "1");
        config.setString("table.exec.resource.default-parallelism", "1");
        TableEnvironment tEnv = TableEnvironment.create(
                EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(config).build());
        tEnv.createTemporarySystemFunction("SEEN", Seen.class);
        tEnv.createTemporarySystemFunction("PREFILLED", Prefilled.class);
        String grace = seconds(args.graceMs());
        tEnv.executeSql(sourceDdl("events", input, args.bootstrap(), grace));
        String rows = "SELECT k, ts, `value`, rt, 1 AS src FROM events";
        if (!run.prefillTopic().isEmpty()) {
            tEnv.executeSql(sourceDdl("prefill", run.prefillTopic(), args.bootstrap(), grace));
            rows = "SELECT k, ts, `value`, rt, 0 AS src FROM prefill WHERE PREFILLED(ts) UNION ALL " + rows;
        }
        tEnv.executeSql(String.format(
                "CREATE TABLE sink (k STRING, ts BIGINT, cnt BIGINT, sm DOUBLE, mx DOUBLE) WITH ("
                        + " 'connector' = 'kafka', 'topic' = '%s', 'properties.bootstrap.servers' = '%s',"
                        + " 'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'json',"
                        + " 'value.fields-include' = 'EXCEPT_KEY', 'sink.delivery-guarantee' = 'at-least-once')",
                run.outputTopic(), args.bootstrap()));
        String insert = String.format(
                "INSERT INTO sink SELECT k, ts, cnt, sm, mx FROM (SELECT k, ts, src,"
                        + " COUNT(*) OVER w AS cnt, SUM(`value`) OVER w AS sm, MAX(`value`) OVER w AS mx"
                        + " FROM (%s) WINDOW w AS (PARTITION BY k ORDER BY rt"
                        + " RANGE BETWEEN %s PRECEDING AND CURRENT ROW)) WHERE SEEN(src)",
                rows, seconds(run.windowMs()));
        tEnv.executeSql(insert).await();
        if (progress.accepted() != events || progress.prefilled() != run.prefillEvents()) {
            throw new IllegalStateException(progress.accepted() + " of " + events + " records and "
                    + progress.prefilled() + " of " + run.prefillEvents() + " prefill records read");
        }
        System.out.println(progress.resultJson("flink", run.occupancy(), run.outputTopic(), phase));
        System.out.flush();
    }

    static String sourceDdl(String table, String topic, String bootstrap, String grace) {
        return String.format(
                "CREATE TABLE %s (k STRING, ts BIGINT, `value` DOUBLE, rt AS TO_TIMESTAMP_LTZ(ts, 3),"
                        + " WATERMARK FOR rt AS rt - %s) WITH ("
                        + " 'connector' = 'kafka', 'topic' = '%s', 'properties.bootstrap.servers' = '%s',"
                        + " 'properties.group.id' = 'fiba-peers-flink-%s',"
                        + " 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',"
                        + " 'key.format' = 'raw', 'key.fields' = 'k', 'value.format' = 'json',"
                        + " 'value.fields-include' = 'EXCEPT_KEY')",
                table, grace, topic, bootstrap, UUID.randomUUID());
    }

    /** Milliseconds as an SQL interval literal, {@code INTERVAL 'd hh:mm:ss.fff' DAY TO SECOND(3)}. */
    static String seconds(long ms) {
        return String.format(
                Locale.ROOT,
                "INTERVAL '%d %02d:%02d:%02d.%03d' DAY TO SECOND(3)",
                ms / 86_400_000, ms / 3_600_000 % 24, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    }

    /** {@code PREFILLED(ts)}: true; counts the prefill row in the run's {@link Progress}. */
    public static final class Prefilled extends ScalarFunction {
        public boolean eval(Long ts) {
            Seen.current.prefill();
            return true;
        }

        @Override
        public boolean isDeterministic() {
            return false;
        }
    }

    /**
     * {@code SEEN(src)}: true; counts an input row ({@code src} 1, not the prefill's 0) in the
     * run's {@link Progress} as the OVER window emits it: the rate is the window's, not the
     * source's (which reads ahead of it, beside the prefill's source).
     */
    public static final class Seen extends ScalarFunction {
        static volatile Progress current;

        public boolean eval(Integer src) {
            if (src == 1) {
                current.accept();
            }
            return true;
        }

        @Override
        public boolean isDeterministic() {
            return false;
        }
    }
}
