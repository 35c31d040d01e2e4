package fiba.peers;

import java.lang.management.ManagementFactory;
import java.util.Locale;

/**
 * How a peer's run is measured, as bench.worker_harness.measure_rate measures the worker:
 * accepted input records per wall second between 30% and 90% of the run's records, and the
 * whole process's CPU time (every JVM thread: the job's, the Kafka clients', GC and JIT)
 * per record there. The job calls {@link #accept()} once per input record it takes in (on
 * one thread); the main thread waits with {@link #awaitAll} and reads the figures.
 */
final class Progress {
    private final long total;
    private final long mark30;
    private final long mark90;
    private volatile long accepted;
    private volatile long prefilled;
    private long wall30, cpu30, wall90, cpu90, prefilledAt30;

    Progress(long total) {
        this.total = total;
        this.mark30 = (long) Math.ceil(0.3 * total);
        this.mark90 = (long) Math.ceil(0.9 * total);
    }

    /** One input record taken in: counts it, and at the 30% and 90% marks notes time and CPU. */
    void accept() {
        long n = accepted + 1;
        accepted = n;
        if (n == mark30) {
            prefilledAt30 = prefilled;
            wall30 = System.nanoTime();
            cpu30 = processCpuNanos();
        } else if (n == mark90) {
            wall90 = System.nanoTime();
            cpu90 = processCpuNanos();
        }
    }

    long accepted() {
        return accepted;
    }

    /** One prefill record taken in (on the job's thread). */
    void prefill() {
        prefilled = prefilled + 1;
    }

    long prefilled() {
        return prefilled;
    }

    /** Wait until every record and {@code prefill} prefill records are taken in; false after
     * {@code timeoutMs}. */
    boolean awaitAll(long prefill, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (accepted < total || prefilled < prefill) {
            if (System.currentTimeMillis() > deadline) {
                return false;
            }
            Thread.sleep(20);
        }
        return true;
    }

    /** Records per wall second between the marks (call after {@link #awaitAll}). */
    double eventsPerSecond() {
        return (mark90 - mark30) / ((wall90 - wall30) / 1e9);
    }

    /** The process's CPU µs per record between the marks. */
    double cpuMicrosPerEvent() {
        return (cpu90 - cpu30) / 1e3 / (mark90 - mark30);
    }

    /** One result line for bench.jvm_peers (JSON, one object per line). */
    String resultJson(String system, int occupancy, String outputTopic, String phase) {
        return String.format(
                Locale.ROOT,
                "{\"system\": \"%s\", \"phase\": \"%s\", \"occupancy\": %d, \"events\": %d,"
                        + " \"events_per_s\": %.1f, \"cpu_us_per_event\": %.2f, \"output_topic\": \"%s\","
                        + " \"prefilled\": %d, \"prefilled_at_30\": %d}",
                system, phase, occupancy, total, eventsPerSecond(), cpuMicrosPerEvent(), outputTopic,
                prefilled, prefilledAt30);
    }

    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }
}
