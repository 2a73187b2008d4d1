import java.io.FileInputStream;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

/**
 * Kafka's Java clients over a secured listener (the security settings come from a properties
 * file: SASL_SSL with SCRAM-SHA-512, or SSL with a client certificate): Admin creates and
 * deletes a topic, an idempotent KafkaProducer writes it, a KafkaConsumer in a group reads and
 * commits, a transactional producer commits one transaction and aborts another, and a
 * read_committed consumer sees only the committed one. Prints one JSON object per line.
 * Arguments: properties-file topic group transactional-id records txn-records
 */
public class SecureJavaClients {
    public static void main(String[] args) throws Exception {
        Properties base = new Properties();
        try (var in = new FileInputStream(args[0])) { base.load(in); }
        String topic = args[1], group = args[2], txn = args[3];
        int records = Integer.parseInt(args[4]), txnRecords = Integer.parseInt(args[5]);
        try (Admin admin = Admin.create(base)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            System.out.println("{\"created\": \"" + topic + "\"}");

            Properties p = copy(base);
            p.put("enable.idempotence", "true");
            p.put("acks", "all");
            try (var producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
                for (int i = 0; i < records; i++) producer.send(new ProducerRecord<>(topic, "plain-" + i)).get();
            }
            System.out.println("{\"produced\": " + records + "}");

            Properties c = copy(base);
            c.put("group.id", group);
            c.put("auto.offset.reset", "earliest");
            c.put("enable.auto.commit", "false");
            int consumed = 0;
            try (var consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
                consumer.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 30_000;
                while (consumed < records && System.currentTimeMillis() < deadline)
                    consumed += consumer.poll(Duration.ofMillis(200)).count();
                consumer.commitSync();
            }
            long committed = 0;
            for (var e : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().values())
                committed += e.offset();
            System.out.println("{\"group\": {\"consumed\": " + consumed + ", \"committed\": " + committed + "}}");

            Properties t = copy(base);
            t.put("transactional.id", txn);
            try (var producer = new KafkaProducer<>(t, new StringSerializer(), new StringSerializer())) {
                producer.initTransactions();
                producer.beginTransaction();
                for (int i = 0; i < txnRecords; i++) producer.send(new ProducerRecord<>(topic, "committed-" + i));
                producer.commitTransaction();
                producer.beginTransaction();
                for (int i = 0; i < txnRecords; i++) producer.send(new ProducerRecord<>(topic, "aborted-" + i));
                producer.flush();
                producer.abortTransaction();
            }
            Properties r = copy(base);
            r.put("isolation.level", "read_committed");
            List<String> seen = new ArrayList<>();
            try (var reader = new KafkaConsumer<>(r, new StringDeserializer(), new StringDeserializer())) {
                var parts = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
                reader.assign(parts);
                reader.seekToBeginning(parts);
                long deadline = System.currentTimeMillis() + 30_000;
                while (seen.size() < records + txnRecords && System.currentTimeMillis() < deadline)
                    for (var rec : reader.poll(Duration.ofMillis(200))) seen.add(rec.value());
            }
            long aborted = seen.stream().filter(v -> v.startsWith("aborted-")).count();
            long fromTxn = seen.stream().filter(v -> v.startsWith("committed-")).count();
            System.out.println("{\"read_committed\": {\"count\": " + seen.size() + ", \"committed\": "
                + fromTxn + ", \"aborted\": " + aborted + "}}");

            admin.deleteTopics(List.of(topic)).all().get();
            System.out.println("{\"deleted\": \"" + topic + "\"}");
        }
    }

    static Properties copy(Properties base) {
        Properties p = new Properties();
        p.putAll(base);
        return p;
    }
}
