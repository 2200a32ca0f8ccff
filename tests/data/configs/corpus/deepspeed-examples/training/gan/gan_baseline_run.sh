python gan_baseline_train.py --dataset celeba --cuda --tensorboard_path './runs/baseline'
