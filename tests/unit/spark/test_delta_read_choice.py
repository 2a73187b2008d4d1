"""Which reader `read_delta` picks: Delta's own only for the Spark its JAR is built for."""

from __future__ import annotations

from sparklog.spark.delta_read import delta_spark_supports

JAR_42 = "/x/.jars/spark/delta-spark_4.2_2.13-4.4.0.jar"
IVY_42 = "file:///root/.ivy2/jars/io.delta_delta-spark_4.2_2.13-4.4.0.jar"


def test_delta_s_jar_reads_on_the_spark_minor_it_is_built_for():
    assert delta_spark_supports("4.2.0", [JAR_42, "/x/kafka-clients-3.9.2.jar"])
    assert delta_spark_supports("4.2.1", [IVY_42])


def test_a_newer_spark_falls_back_to_the_file_listing_reader():
    # delta-spark 4.4 (for Spark 4.2) fails to read on 4.3: NoSuchMethodError LogicalRDD.<init>
    assert not delta_spark_supports("4.3.0", [JAR_42])
    assert not delta_spark_supports("4.3.0", [IVY_42])


def test_a_spark_that_ships_delta_itself_is_taken_at_its_word():
    assert delta_spark_supports("4.3.0", [""])
    assert delta_spark_supports("4.3.0", ["/opt/spark/jars/delta-spark_2.13-4.0.0.jar"])
