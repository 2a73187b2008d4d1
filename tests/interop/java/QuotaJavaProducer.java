// Kafka's Java producer flat out under a client quota (issue 31, a port of quota_test.py's
// producer): sends 1 KB records for the given milliseconds, then prints one JSON line with
// the records acknowledged and the producer's own produce-throttle-time-avg/max metrics.
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class QuotaJavaProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], clientId = args[2];
        long runMs = Long.parseLong(args[3]);
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ProducerConfig.LINGER_MS_CONFIG, 2);
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, 16384);
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, 1 << 20);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 100);
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
        AtomicLong acked = new AtomicLong();
        byte[] value = new byte[1000];
        double avg = Double.NaN, max = Double.NaN;
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            long end = System.currentTimeMillis() + runMs;
            while (System.currentTimeMillis() < end) {
                try {
                    producer.send(new ProducerRecord<>(topic, value), (md, e) -> {
                        if (e == null) acked.incrementAndGet();
                    });
                } catch (Exception e) {
                    // buffer full for max.block.ms: the producer is being throttled
                }
            }
            for (Map.Entry<MetricName, ? extends Metric> m : producer.metrics().entrySet()) {
                MetricName n = m.getKey();
                if (!n.group().equals("producer-metrics")) continue;
                if (n.name().equals("produce-throttle-time-avg")) avg = (Double) m.getValue().metricValue();
                if (n.name().equals("produce-throttle-time-max")) max = (Double) m.getValue().metricValue();
            }
            producer.close(java.time.Duration.ZERO);
        }
        System.out.printf("{\"acked\": %d, \"throttle_avg\": %s, \"throttle_max\": %s}%n",
                acked.get(), Double.isNaN(avg) ? "null" : avg, Double.isNaN(max) ? "null" : max);
    }
}
