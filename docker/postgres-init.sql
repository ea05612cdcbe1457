-- The results store lives beside Airflow's metadata database.
CREATE DATABASE scalewatch OWNER airflow;
