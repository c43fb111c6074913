# All set-up lives here: a fresh machine of this kind needs only `make test` / `make demo`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kmq-installed

.PHONY: test test-unit demo install system-deps kafka spark-jars clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark,demo]'
	touch $(STAMP)

install: $(STAMP)

# Debian's OpenLDAP server and tools, for the directory tests against a real slapd.
system-deps:
	@bash deploy/install-system-deps.sh

# Apache Kafka's jars (deploy/kafka/pom.xml), resolved from Maven Central by Maven into kmq's jar
# cache (~/.cache/kmq/jars) once; `kmq dev up`, the tests, the demo and the bench start the
# broker from there. Needs a JDK 17+ and mvn.
kafka: install
	$(PY) -c "from facade.kafka.localkafka import KAFKA_POM; from facade.kafka.mavenjars import find_java, resolve_jars; find_java(); print('Kafka jars:', resolve_jars(KAFKA_POM))"

# Spark's Kafka source and sink and spark-avro (deploy/spark/pom.xml), at exactly the pinned
# pyspark's version, resolved by Maven into the same jar cache; spark_connector.local_session()
# puts them on spark.jars. Needs mvn. Then the class-data archive local Spark sessions' JVM
# maps at start (spark_connector/classarchive.py), recorded once per Java and pyspark.
spark-jars: install
	$(PY) -c "from spark_connector.jars import connector_jars; print('Spark connector jars:', *connector_jars(), sep='\n  ')"
	$(PY) -m spark_connector.classarchive

# Everything: unit tests, the type check (mypy), and the integration tests that start Apache
# Kafka and slapd.
test: install system-deps kafka spark-jars
	$(PY) -m pytest $(PYTEST_ARGS)

# Fast: no broker, no slapd (tests that start one are marked integration by tests/conftest.py);
# the type check included.
test-unit: install
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

demo: install kafka spark-jars
	$(VENV)/bin/kmq demo $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
