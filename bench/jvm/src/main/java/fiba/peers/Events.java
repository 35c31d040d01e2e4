package fiba.peers;

/**
 * The benchmark's input values, {@code {"ts": <epoch ms>, "value": <number>}} as
 * bench.worker_harness.event_stream writes them, read without a JSON library: the number
 * after each field's name.
 */
final class Events {
    private Events() {}

    static long ts(String json) {
        return Long.parseLong(field(json, "\"ts\""));
    }

    static double value(String json) {
        return Double.parseDouble(field(json, "\"value\""));
    }

    private static String field(String json, String name) {
        int at = json.indexOf(name);
        if (at < 0) {
            throw new IllegalArgumentException("no " + name + " in " + json);
        }
        int start = json.indexOf(':', at + name.length()) + 1;
        while (json.charAt(start) == ' ') {
            start++;
        }
        int end = start;
        while (end < json.length() && ",} ".indexOf(json.charAt(end)) < 0) {
            end++;
        }
        return json.substring(start, end);
    }
}
