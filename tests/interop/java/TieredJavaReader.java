// Kafka's Java clients against offsets that only a sparklog topic's remote tier holds (KIP-405):
// the consumer reads every partition from the beginning until it has the given count of records
// and prints one line per record (partition, offset, timestamp, base64 key, value and headers);
// then the Admin client's ListOffsets for partition 0 prints earliest, earliest-local (-4, v8),
// latest-tiered (-5, v9) and latest on an "OFFSETS" line.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class TieredJavaReader {
    static String b64(byte[] b) {
        return b == null ? "-" : Base64.getEncoder().encodeToString(b);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        int got = 0;
        try (KafkaConsumer<byte[], byte[]> consumer =
                new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic)) {
                tps.add(new TopicPartition(topic, p.partition()));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 60_000;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    StringBuilder headers = new StringBuilder();
                    for (Header h : r.headers()) {
                        if (headers.length() > 0) headers.append(',');
                        headers.append(h.key()).append('=').append(b64(h.value()));
                    }
                    System.out.println(r.partition() + " " + r.offset() + " " + r.timestamp() + " "
                            + b64(r.key()) + " " + b64(r.value()) + " "
                            + (headers.length() == 0 ? "-" : headers));
                    got++;
                }
            }
        }
        Properties adminProps = new Properties();
        adminProps.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            OffsetSpec[] specs = {OffsetSpec.earliest(), OffsetSpec.earliestLocal(),
                    OffsetSpec.latestTiered(), OffsetSpec.latest()};
            StringBuilder line = new StringBuilder("OFFSETS");
            for (OffsetSpec spec : specs) {
                long offset = admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get().offset();
                line.append(' ').append(offset);
            }
            System.out.println(line);
        }
    }
}
