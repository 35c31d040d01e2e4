package fiba.peers;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Kafka Streams' sliding windows (KIP-450) on the benchmark's input: per key,
 * {@code SlidingWindows.ofTimeDifferenceAndGrace(window, grace)} aggregating count, sum and max
 * of {@code value}, event time from the value's {@code ts}; every window update goes to the
 * output topic as {@code {"start", "end", "count", "sum", "max"}} keyed by the input key. One
 * stream thread, RocksDB window store (its changelog on), at-least-once; the record cache on
 * (VARIANT {@code cache}, Kafka Streams' default 10 MB) or off ({@code nocache}: every update
 * forwarded). Each run is a new application on the same JVM (see {@link Args}); a run's state
 * is first filled from its prefill topic, merged with the input: within a task Kafka Streams
 * takes the record with the smallest timestamp first (given {@code max.task.idle.ms}, see
 * below), and the prefill's are older.
 */
public final class KafkaStreamsSliding {
    private KafkaStreamsSliding() {}

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
        StreamsBuilder builder = new StreamsBuilder();
        Consumed<String, String> consumed =
                Consumed.with(Serdes.String(), Serdes.String()).withTimestampExtractor(new EventTime());
        KStream<String, String> stream = builder.stream(input, consumed)
                .peek((k, v) -> progress.accept());
        if (!run.prefillTopic().isEmpty()) {
            stream = builder.stream(run.prefillTopic(), consumed)
                    .peek((k, v) -> progress.prefill())
                    .merge(stream);
        }
        stream.mapValues(Events::value)
                .groupByKey(Grouped.with(Serdes.String(), Serdes.Double()))
                .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(
                        Duration.ofMillis(run.windowMs()), Duration.ofMillis(args.graceMs())))
                .aggregate(
                        Agg::new,
                        (key, value, agg) -> agg.add(value),
                        Materialized.<String, Agg, WindowStore<Bytes, byte[]>>as("sliding")
                                .withKeySerde(Serdes.String())
                                .withValueSerde(new AggSerde()))
                .toStream()
                .map((windowed, agg) -> KeyValue.pair(
                        windowed.key(), agg.json(windowed.window().start(), windowed.window().end())))
                .to(run.outputTopic(), Produced.with(Serdes.String(), Serdes.String()));

        Properties props = new Properties();
        String applicationId = "fiba-peers-ks-" + UUID.randomUUID();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.bootstrap());
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("fiba-peers-ks").toString());
        props.put(
                StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG,
                run.variant().equals("nocache") ? 0L : 10L * 1024 * 1024);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // Take the prefill first: with the default 0, a task whose prefill partition has no
        // record in its queue and a lag of 0 (its last records fetched but still in the
        // consumer's buffer) goes on with the input, whose stream time then closes the
        // prefill's windows; and with the cache off at large windows one poll's records take
        // seconds. Waiting up to 60 s for them costs one idle minute per run, once the prefill
        // is over, before the measured part.
        props.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, 60_000L);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.start();
        try {
            if (!progress.awaitAll(run.prefillEvents(), 3_600_000)) {
                throw new IllegalStateException(
                        "timeout: " + progress.accepted() + " of " + events + " records accepted");
            }
        } finally {
            streams.close(Duration.ofMinutes(10)); // flushes the cache, commits, flushes the producer
            streams.cleanUp();
            deleteChangelog(args.bootstrap(), applicationId);
        }
        String system = run.variant().equals("nocache") ? "kafka-streams-nocache" : "kafka-streams-cache";
        System.out.println(progress.resultJson(system, run.occupancy(), run.outputTopic(), phase));
        System.out.flush();
    }

    /**
     * Delete the run's changelog topic once the run is over (with the cache off it holds about
     * as many records as the output: gigabytes at large windows).
     */
    static void deleteChangelog(String bootstrap, String applicationId) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            admin.deleteTopics(List.of(applicationId + "-sliding-changelog")).all().get();
        }
    }

    /** The record's event time: its value's {@code ts}. */
    public static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            return Events.ts((String) record.value());
        }
    }

    /**
     * count, sum and max of the window's values. Immutable in use: Kafka Streams hands one
     * window's aggregate on as another's (a record's right window starts as a copy of the window
     * it fell in), so {@link #add} returns a new one.
     */
    static final class Agg {
        long count;
        double sum;
        double max = Double.NEGATIVE_INFINITY;

        Agg add(double value) {
            Agg next = new Agg();
            next.count = count + 1;
            next.sum = sum + value;
            next.max = Math.max(max, value);
            return next;
        }

        String json(long start, long end) {
            return String.format(
                    Locale.ROOT,
                    "{\"start\": %d, \"end\": %d, \"count\": %d, \"sum\": %s, \"max\": %s}",
                    start, end, count, Double.toString(sum), Double.toString(max));
        }
    }

    /** {@link Agg} as 24 bytes. */
    static final class AggSerde implements Serde<Agg> {
        @Override
        public Serializer<Agg> serializer() {
            return (topic, agg) -> ByteBuffer.allocate(24)
                    .putLong(agg.count).putDouble(agg.sum).putDouble(agg.max).array();
        }

        @Override
        public Deserializer<Agg> deserializer() {
            return (topic, bytes) -> {
                ByteBuffer buffer = ByteBuffer.wrap(bytes);
                Agg agg = new Agg();
                agg.count = buffer.getLong();
                agg.sum = buffer.getDouble();
                agg.max = buffer.getDouble();
                return agg;
            };
        }
    }
}
