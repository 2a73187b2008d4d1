// Kafka's Java consumer flat out under a consumer_byte_rate quota (issue 31, a port of
// quota_test.py's consumer): reads the topic's partition 0 from the start for the given
// milliseconds, then prints one JSON line with the value bytes received and the consumer's own
// fetch-throttle-time-avg/max metrics (group consumer-fetch-manager-metrics).
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class QuotaJavaConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], clientId = args[2];
        long runMs = Long.parseLong(args[3]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        long received = 0;
        double avg = Double.NaN, max = Double.NaN;
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = System.currentTimeMillis() + runMs;
            while (System.currentTimeMillis() < end) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                    received += r.value().length;
                }
            }
            for (Map.Entry<MetricName, ? extends Metric> m : consumer.metrics().entrySet()) {
                MetricName n = m.getKey();
                if (!n.group().equals("consumer-fetch-manager-metrics")) continue;
                if (n.name().equals("fetch-throttle-time-avg")) avg = (Double) m.getValue().metricValue();
                if (n.name().equals("fetch-throttle-time-max")) max = (Double) m.getValue().metricValue();
            }
        }
        System.out.printf("{\"received\": %d, \"throttle_avg\": %s, \"throttle_max\": %s}%n",
                received, Double.isNaN(avg) ? "null" : avg, Double.isNaN(max) ? "null" : max);
    }
}
