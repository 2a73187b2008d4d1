import java.time.Duration;
import java.util.*;
import java.util.stream.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

/**
 * Kafka's transactions through Kafka's own Java clients against sparklog: a read-process-write
 * loop (read_committed consumer in a group, transactional producer, sendOffsetsToTransaction,
 * every third transaction aborted and its input re-read), a zombie producer fenced by its
 * successor, and Admin's listTransactions / describeTransactions / describeProducers.
 * Prints one JSON object per line; the pytest side checks the values.
 */
public class SparklogJavaTransactions {
    static final int RECORDS = 300;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], source = args[1], sink = args[2], fenced = args[3];
        Properties adminProps = new Properties();
        adminProps.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(adminProps)) {
            admin.createTopics(List.of(new NewTopic(source, 3, (short) 1),
                new NewTopic(sink, 3, (short) 1), new NewTopic(fenced, 1, (short) 1))).all().get();
            produceInput(bootstrap, source);
            int aborted = readProcessWrite(bootstrap, source, sink);
            System.out.println("{\"aborted_txns\": " + aborted + "}");
            System.out.println("{\"zombie\": \"" + zombie(bootstrap, fenced) + "\"}");
            List<String> out = readCommitted(bootstrap, sink, RECORDS);
            System.out.println("{\"sink\": {\"count\": " + out.size() + ", \"distinct\": "
                + new HashSet<>(out).size() + ", \"aborted_seen\": "
                + out.stream().filter(v -> v.endsWith("|abort")).count() + "}}");
            System.out.println("{\"fenced_topic\": \"" + String.join(",", readCommitted(bootstrap, fenced, 1)) + "\"}");
            long committed = 0;
            for (var e : admin.listConsumerGroupOffsets("java-eos").partitionsToOffsetAndMetadata().get().entrySet())
                committed += e.getValue().offset();
            System.out.println("{\"committed\": " + committed + "}");
            var listed = admin.listTransactions().all().get().stream()
                .filter(t -> t.transactionalId().equals("java-eos-tx")).map(t -> t.state().toString()).collect(Collectors.toList());
            System.out.println("{\"listed\": \"" + String.join(",", listed) + "\"}");
            var described = admin.describeTransactions(List.of("java-eos-tx")).all().get().get("java-eos-tx");
            System.out.println("{\"described\": {\"state\": \"" + described.state() + "\", \"partitions\": "
                + described.topicPartitions().size() + ", \"timeout\": " + described.transactionTimeoutMs() + "}}");
            var sinkParts = List.of(new TopicPartition(sink, 0), new TopicPartition(sink, 1), new TopicPartition(sink, 2));
            var producerIds = admin.describeProducers(sinkParts).all().get().values().stream()
                .flatMap(d -> d.activeProducers().stream()).map(s -> s.producerId()).collect(Collectors.toSet());
            System.out.println("{\"producers_on_sink\": " + producerIds.size() + "}");
        }
    }

    static void produceInput(String bootstrap, String source) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        try (var producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < RECORDS; i++) producer.send(new ProducerRecord<>(source, i % 3, null, "v" + i));
            producer.flush();
        }
    }

    static int readProcessWrite(String bootstrap, String source, String sink) throws Exception {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", "java-eos");
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("max.poll.records", "40");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", "java-eos-tx");
        int done = 0, txns = 0, aborted = 0;
        try (var consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
             var producer = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            consumer.subscribe(List.of(source));
            long deadline = System.currentTimeMillis() + 120_000;
            while (done < RECORDS && System.currentTimeMillis() < deadline) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                txns++;
                boolean abort = txns % 3 == 0;
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (var r : records) {
                    producer.send(new ProducerRecord<>(sink, r.value() + (abort ? "|abort" : "|ok")));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                if (abort) {
                    producer.abortTransaction();
                    aborted++;
                    var committed = consumer.committed(consumer.assignment());
                    for (var tp : consumer.assignment()) {
                        var o = committed.get(tp);
                        if (o == null) consumer.seekToBeginning(List.of(tp)); else consumer.seek(tp, o.offset());
                    }
                } else {
                    producer.commitTransaction();
                    done += records.count();
                }
            }
        }
        return aborted;
    }

    static String zombie(String bootstrap, String topic) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", "java-zombie");
        var first = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        first.initTransactions();
        first.beginTransaction();
        first.send(new ProducerRecord<>(topic, 0, null, "zombie")).get();
        try (var second = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            second.initTransactions();
            second.beginTransaction();
            second.send(new ProducerRecord<>(topic, 0, null, "successor"));
            second.commitTransaction();
        }
        String outcome = "committed";
        try {
            first.commitTransaction();
        } catch (Exception e) {
            outcome = e.getClass().getSimpleName();
        } finally {
            first.close(Duration.ofSeconds(5));
        }
        return outcome;
    }

    static List<String> readCommitted(String bootstrap, String topic, int want) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        List<String> values = new ArrayList<>();
        try (var consumer = new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            var parts = consumer.partitionsFor(topic).stream()
                .map(i -> new TopicPartition(topic, i.partition())).collect(Collectors.toList());
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            long deadline = System.currentTimeMillis() + 30_000;
            long extra = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, extra)) {
                for (var r : consumer.poll(Duration.ofMillis(200))) values.add(r.value());
                if (values.size() >= want && extra == Long.MAX_VALUE) extra = System.currentTimeMillis() + 1000;
            }
        }
        return values;
    }
}
