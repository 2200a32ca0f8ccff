python train_bert.py --checkpoint_dir ./experiment
