// Kafka's Java clients (the reference implementation) against a sparklog cluster.
// Usage: java SparklogJavaClients <bootstrap> <topic>; prints one JSON object per line that
// tests/interop/test_java_clients.py checks. Exits non-zero on any client exception.

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SparklogJavaClients {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final int PER_CODEC = 50;

    static String q(String s) {
        return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            DescribeClusterResult cluster = admin.describeCluster();
            System.out.println("{\"cluster\": {\"id\": " + q(cluster.clusterId().get())
                + ", \"nodes\": " + cluster.nodes().get().size()
                + ", \"controller\": " + cluster.controller().get().id() + "}}");
            TopicDescription described = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("{\"topic\": {\"name\": " + q(described.name())
                + ", \"partitions\": " + described.partitions().size()
                + ", \"replicas\": " + described.partitions().get(0).replicas().size() + "}}");

            produce(bootstrap, topic);
            consume(bootstrap, topic, "read_uncommitted");
            consume(bootstrap, topic, "read_committed");

            TopicPartition p0 = new TopicPartition(topic, 0);
            Map<String, Long> offsets = new HashMap<>();
            offsets.put("earliest", listOffset(admin, p0, OffsetSpec.earliest()));
            offsets.put("latest", listOffset(admin, p0, OffsetSpec.latest()));
            offsets.put("max_timestamp", listOffset(admin, p0, OffsetSpec.maxTimestamp()));
            offsets.put("by_timestamp", listOffset(admin, p0, OffsetSpec.forTimestamp(1_700_000_000_000L + 3)));
            admin.deleteRecords(Map.of(p0, RecordsToDelete.beforeOffset(10))).all().get();
            offsets.put("earliest_after_delete", listOffset(admin, p0, OffsetSpec.earliest()));
            StringBuilder o = new StringBuilder("{\"offsets\": {");
            String sep = "";
            for (Map.Entry<String, Long> e : offsets.entrySet()) {
                o.append(sep).append(q(e.getKey())).append(": ").append(e.getValue());
                sep = ", ";
            }
            System.out.println(o.append("}}"));

            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Collection<AlterConfigOp> ops = List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "86400000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND));
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            System.out.println("{\"configs\": {\"retention.ms\": " + q(config.get("retention.ms").value())
                + ", \"cleanup.policy\": " + q(config.get("cleanup.policy").value())
                + ", \"retention.ms.source\": " + q(config.get("retention.ms").source().name()) + "}}");

            int broker = cluster.nodes().get().iterator().next().id();
            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(List.of(broker)).allDescriptions().get();
            long size = 0;
            int partitions = 0;
            for (LogDirDescription d : dirs.get(broker).values()) {
                if (d.error() != null) throw d.error();
                for (Map.Entry<TopicPartition, org.apache.kafka.clients.admin.ReplicaInfo> r : d.replicaInfos().entrySet()) {
                    if (r.getKey().topic().equals(topic)) {
                        partitions += 1;
                        size += r.getValue().size();
                    }
                }
            }
            System.out.println("{\"log_dirs\": {\"dirs\": " + dirs.get(broker).size() + ", \"partitions\": " + partitions + ", \"bytes\": " + size + "}}");
        }
    }

    static long listOffset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        ListOffsetsResult.ListOffsetsResultInfo info = admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get();
        return info.offset();
    }

    static void produce(String bootstrap, String topic) throws Exception {
        int sent = 0;
        for (String codec : CODECS) {
            Properties props = new Properties();
            props.put("bootstrap.servers", bootstrap);
            props.put("acks", "all");
            props.put("enable.idempotence", "true");
            props.put("compression.type", codec);
            props.put("linger.ms", "5");
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
                List<java.util.concurrent.Future<RecordMetadata>> futures = new ArrayList<>();
                for (int i = 0; i < PER_CODEC; i++) {
                    int n = sent + i;
                    ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, n % 3, 1_700_000_000_000L + n,
                        n % 4 == 0 ? null : ("key-" + n).getBytes(StandardCharsets.UTF_8),
                        (codec + "-value-" + n).getBytes(StandardCharsets.UTF_8));
                    record.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                    futures.add(producer.send(record));
                }
                for (java.util.concurrent.Future<RecordMetadata> f : futures) f.get();
            }
            sent += PER_CODEC;
        }
        System.out.println("{\"produced\": " + sent + "}");
    }

    static void consume(String bootstrap, String topic, String isolation) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("isolation.level", isolation);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "none");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1), new TopicPartition(topic, 2));
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> ends = consumer.endOffsets(parts);
            long positionBefore = consumer.position(parts.get(1));
            consumer.seek(parts.get(2), 5);
            List<String> rows = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 30_000;
            long want = 0;
            for (TopicPartition tp : parts) want += ends.get(tp) - (tp.partition() == 2 ? 5 : 0);
            while (rows.size() < want && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    Header h = r.headers().lastHeader("codec");
                    rows.add("[" + r.partition() + ", " + r.offset() + ", " + r.timestamp() + ", " + q(text(r.key())) + ", "
                        + q(text(r.value())) + ", " + q(h == null ? null : text(h.value())) + "]");
                }
            }
            System.out.println("{\"consumed\": {\"isolation\": " + q(isolation) + ", \"position_before\": " + positionBefore
                + ", \"ends\": [" + ends.get(parts.get(0)) + ", " + ends.get(parts.get(1)) + ", " + ends.get(parts.get(2)) + "]"
                + ", \"records\": [" + String.join(", ", rows) + "]}}");
        }
    }
}
